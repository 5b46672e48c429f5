import pytest

from keras_attn.checks import check_heads_divide, check_sizes
from keras_attn.models import music_transformer, translation_transformer


def test_check_sizes_names_the_first_bad_argument_and_refuses_bools():
    check_sizes(a=1, b=512)
    for value in (0, -3, 2.0, True, None):
        with pytest.raises(
            ValueError, match=rf"`b` must be a positive integer. Received: b={value!r}\."
        ):
            check_sizes(a=1, b=value)


def test_check_heads_divide():
    check_heads_divide(512, 8)
    with pytest.raises(
        ValueError, match=r"`hidden_dim` \(30\) must be divisible by `num_heads` \(4\)"
    ):
        check_heads_divide(30, 4)


def test_every_builder_uses_the_shared_checks():
    # translation_transformer used to accept num_layers=True (bool is an int).
    with pytest.raises(ValueError, match="`num_layers` must be a positive integer"):
        translation_transformer(100, num_layers=True)
    with pytest.raises(ValueError, match=r"`hidden_dim` \(30\) must be divisible"):
        music_transformer(100, hidden_dim=30, num_heads=4)


def test_check_positive_int_refuses_numpy_integers_and_says_to_pass_a_python_int():
    import numpy as np

    from keras_attn.checks import check_positive_int
    from keras_attn.layers import MultiHeadSelfAttention, TransformerEncoder

    layer = MultiHeadSelfAttention(num_heads=2, key_dim=4)
    check_positive_int(layer, "num_heads", 2)
    for value in (np.int64(2), np.int32(3), np.uint8(1)):
        with pytest.raises(
            ValueError,
            match=r"`num_heads` must be a positive integer\. Received: "
            r"num_heads=.*Pass a Python int: `num_heads=int\(num_heads\)`",
        ):
            check_positive_int(layer, "num_heads", value)
    # At construction, not at the first call with Dense's message about `units`.
    with pytest.raises(
        ValueError,
        match=r"MultiHeadSelfAttention: `num_heads` must be a positive integer.*int\(num_heads\)",
    ):
        MultiHeadSelfAttention(num_heads=np.int64(2), key_dim=4)
    with pytest.raises(
        ValueError,
        match=r"TransformerEncoder: `intermediate_dim` must be a positive integer.*int\(intermediate_dim\)",
    ):
        TransformerEncoder(intermediate_dim=np.int64(16), num_heads=2)
    # A Python int that is too small gets no such hint.
    with pytest.raises(ValueError, match=r"Received: num_heads=0\.$"):
        check_positive_int(layer, "num_heads", 0)
    # Configs hold Python ints: a round trip still passes the check.
    clone = MultiHeadSelfAttention.from_config(layer.get_config())
    assert (clone.num_heads, clone.key_dim) == (2, 4)
    encoder = TransformerEncoder(intermediate_dim=int(np.int64(16)), num_heads=2)
    assert TransformerEncoder.from_config(encoder.get_config()).intermediate_dim == 16


def test_generic_helpers_values_and_messages():
    import keras
    import numpy as np

    from keras_attn import checks

    assert checks.is_int(np.int64(3), 1, 3) and not checks.is_int(True) and not checks.is_int(2.0)
    assert (
        checks.is_number(0.5, 0, 1)
        and not checks.is_number(float("nan"))
        and not checks.is_number(False)
    )
    with pytest.raises(ValueError, match=r"^`k` must be an int >= 1\. Received: k=0\. Pass k=1\.$"):
        checks.require(False, "k", 0, "an int >= 1", "Pass k=1.")
    assert checks.static_int(np.int32(4)) == 4 and checks.static_int(None) is None
    assert checks.static_int(2.5) is None
    assert checks.known_value(keras.ops.convert_to_tensor([1, 2])).tolist() == [1, 2]
    assert checks.check_image_size(4) == (4, 4) and checks.check_image_size([2, np.int64(3)]) == (
        2,
        3,
    )
    for bad in ((2, 0), (1, 2, 3), True, "4"):
        with pytest.raises(
            ValueError, match=r"`image_size` must be a positive int or a pair of positive ints"
        ):
            checks.check_image_size(bad)
    with pytest.raises(
        ValueError,
        match=r"`cache_index` must be an integer scalar .*Received: cache_index=1\.5 \(float\)\.$",
    ):
        checks.check_index(1.5, "cache_index")
    for bad in (1.0, -0.1, float("nan"), True):
        with pytest.raises(
            ValueError,
            match=rf"^`dropout` must be a number in \[0, 1\)\. Received: dropout={bad!r}\.$",
        ):
            checks.check_rate(None, "dropout", bad)
    with pytest.raises(
        ValueError, match=r"must be True or False \(True = on\)\. .*Pass `flag=bool\(flag\)`\.$"
    ):
        checks.check_bool(None, "flag", np.bool_(True), "True = on")
    with pytest.raises(
        ValueError,
        match=r"^`cache.shape` must be \(batch, 2\) as made\. Received: cache\.shape=\(1, 3\)\.$",
    ):
        checks.check_cache(np.zeros((1, 3), "float32"), ("batch", 2), "as made")
    with pytest.raises(
        ValueError,
        match=r"^`cache.dtype` must be floating-point, as made\. Received: cache\.dtype='int32'\.$",
    ):
        checks.check_cache(np.zeros((1, 2), "int32"), ("batch", 2), "as made")
