import re

import numpy as np
import pytest

from keras_attn.checks import check_heads_divide, check_sizes
from keras_attn.models import music_transformer, translation_transformer
from tests.test_case import traced


def test_check_sizes_names_the_first_bad_argument_and_refuses_bools():
    check_sizes(a=1, b=512)
    for value in (0, -3, 2.0, True, None):
        with pytest.raises(ValueError, match=rf"`b` must be a positive integer. Received: b={value!r}\."):
            check_sizes(a=1, b=value)


def test_check_heads_divide():
    check_heads_divide(512, 8)
    with pytest.raises(ValueError, match=r"`hidden_dim` \(30\) must be divisible by `num_heads` \(4\)"):
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
        with pytest.raises(ValueError, match=r"`num_heads` must be a positive integer\. Received: "
                                             r"num_heads=.*pass a Python int, e\.g\. `num_heads=int\(num_heads\)`"):
            check_positive_int(layer, "num_heads", value)
    # At construction, not at the first call with Dense's message about `units`.
    with pytest.raises(ValueError, match=r"MultiHeadSelfAttention: `num_heads` must be a positive integer.*int\(num_heads\)"):
        MultiHeadSelfAttention(num_heads=np.int64(2), key_dim=4)
    with pytest.raises(ValueError, match=r"TransformerEncoder: `intermediate_dim` must be a positive integer.*int\(intermediate_dim\)"):
        TransformerEncoder(intermediate_dim=np.int64(16), num_heads=2)
    # A Python int that is too small gets no such hint (it used to read "It
    # is a builtins.int: pass a Python int").
    with pytest.raises(ValueError, match=r"Received: num_heads=0\.$"):
        check_positive_int(layer, "num_heads", 0)
    # Configs hold Python ints: a round trip still passes the check.
    clone = MultiHeadSelfAttention.from_config(layer.get_config())
    assert (clone.num_heads, clone.key_dim) == (2, 4)
    encoder = TransformerEncoder(intermediate_dim=int(np.int64(16)), num_heads=2)
    assert TransformerEncoder.from_config(encoder.get_config()).intermediate_dim == 16


def test_check_token_id_refuses_ids_outside_the_vocabulary():
    from keras_attn.checks import check_token_id

    check_token_id("end_token_id", 39, vocabulary_size=40)
    check_token_id("end_token_id", 100)  # the vocabulary is not known: no range
    check_token_id("end_token_id", None, vocabulary_size=40)
    with pytest.raises(ValueError, match=r"`end_token_id` must be an id of the model's vocabulary "
                                         r"\[0, 40\).*Received: end_token_id=100\."):
        check_token_id("end_token_id", 100, vocabulary_size=40)
    with pytest.raises(ValueError, match=r"`pad_token_id` must be an id of the model's vocabulary \[0, 40\)"):
        check_token_id("pad_token_id", 40, vocabulary_size=40)


def test_check_prompt_ids_eagerly():
    import numpy as np

    from keras_attn.checks import check_prompt_ids

    check_prompt_ids(np.array([[0, 39]], "int32"), 40)
    for ids, lowest, highest in (([[1, 45]], 1, 45), ([[1, -3]], -3, 1)):
        with pytest.raises(ValueError, match=rf"`prompt` must hold token ids in \[0, 40\).*"
                                             rf"Received: prompt ids from {lowest} to {highest}\."):
            check_prompt_ids(np.array(ids, "int32"), 40)


def test_check_beam_arguments_refuses_non_finite_alpha():
    from keras_attn.checks import check_beam_arguments

    check_beam_arguments(4, 0.6)
    check_beam_arguments(1, 0)
    for alpha in (float("nan"), float("inf"), -1.0, True, "0.6", None):
        with pytest.raises(ValueError, match=rf"`length_penalty_alpha` must be a number >= 0 and finite.*"
                                             rf"Received: length_penalty_alpha={re.escape(repr(alpha))}\."):
            check_beam_arguments(4, alpha)
    for beams in (0, 2.0, True):
        with pytest.raises(ValueError, match="`num_beams` must be a positive int"):
            check_beam_arguments(beams, 0.6)


def test_check_seed_refuses_what_is_not_an_int():
    import keras
    import numpy as np

    from keras_attn.checks import check_seed

    for seed in (0, -1, 2**40, np.int64(3), keras.ops.convert_to_tensor(3, "int32"),
                 keras.ops.convert_to_tensor([3, 0], "int32"), [3, 0], np.array(5)):
        check_seed(seed)
    for seed, received in ((1.5, "seed=1.5 (float)"), ("a", "seed='a' (str)"), (None, "seed=None"),
                           (True, "seed=True"), (np.float32(2.0), "seed of dtype float32"),
                           (keras.ops.convert_to_tensor(1.0), "seed of dtype float32 and shape ()"),
                           ([1.0, 2.0], "seed of dtype float64 and shape (2,)"),
                           (np.zeros((2, 2), "int32"), "seed of dtype int32 and shape (2, 2)")):
        with pytest.raises(ValueError, match=r"`seed` must be an int, or an int tensor of shape \(\) or "
                                             rf"\(2,\).*Received: {re.escape(received)}"):
            check_seed(seed)
    # Only the low 64 bits are read: 2**70 drew the tokens of seed 0.
    for seed in (-(2**63), 2**64 - 1, np.uint64(2**64 - 1)):
        check_seed(seed)
    for seed in (2**64, 2**70, -(2**63) - 1):
        with pytest.raises(ValueError, match=rf"`seed` must fit 64 bits .*Received: seed={seed}\."):
            check_seed(seed)


def test_check_input_names_lists_the_accepted_names():
    from keras_attn.checks import check_input_names

    check_input_names({"encoder_tokens": 1}, ["encoder_tokens"], "decoder_tokens")
    check_input_names(None, [], "tokens")
    with pytest.raises(ValueError, match=r"`inputs` has names the model does not take: \['encoder_tokenz'\]\. "
                                         r"Accepted names: \['encoder_tokens'\]"):
        check_input_names({"encoder_tokens": 1, "encoder_tokenz": 2}, ["encoder_tokens"], "decoder_tokens")
    with pytest.raises(ValueError, match=r"\['tokens'\]\. This model takes no input besides its tokens"):
        check_input_names({"tokens": 1}, [], "tokens")


def test_checked_by_caller_leaves_out_traced_checks_and_restores_them():
    import keras

    from keras_attn.checks import check_in_graph, checked_by_caller

    def failing_check(condition, in_scope=False):  # traced as the backend traces
        def check(c):
            if not in_scope:
                return check_in_graph(c, "checked", keras.ops.ones(()))
            with checked_by_caller():
                return check_in_graph(c, "checked", keras.ops.ones(()))

        return traced(check)(condition)

    false = keras.ops.array(False)
    failing_check(false, in_scope=True)  # left out: no error
    with pytest.raises(Exception, match="checked"):
        failing_check(false)
    with pytest.raises(RuntimeError), checked_by_caller():
        raise RuntimeError("leaving the scope by an exception")
    with pytest.raises(Exception, match="checked"):
        failing_check(false)


@pytest.mark.requires_tensorflow
def test_a_function_traced_inside_the_scope_keeps_its_checks():
    # Its trace is cached and reused outside the scope (a decoder whose
    # __call__ is a tf.function, traced inside a generation loop's step):
    # the scope covers only the graph being built where it was entered.
    import tensorflow as tf

    from keras_attn.checks import check_in_graph, checked_by_caller

    inner = tf.function(lambda c: check_in_graph(c, "checked", tf.ones(())))

    @tf.function
    def outer(c):
        with checked_by_caller():
            return inner(c) + check_in_graph(c, "left out", tf.ones(()))

    with pytest.raises(tf.errors.InvalidArgumentError, match="checked"):
        outer(tf.constant(False))
    with pytest.raises(tf.errors.InvalidArgumentError, match="checked"):
        inner(tf.constant(False))  # the trace made inside the scope, reused


def test_check_batch_not_empty_names_the_tensor_and_its_shape():
    import numpy as np

    from keras_attn.checks import check_batch_not_empty

    rows = np.zeros((2, 3), "int32")
    assert check_batch_not_empty("prompt", rows) is rows
    with pytest.raises(ValueError, match=re.escape(
        "`prompt` must hold at least one row (batch size >= 1): there is nothing to "
        "generate for an empty batch. Received: prompt.shape=(0, 3).")):
        check_batch_not_empty("prompt", np.zeros((0, 3), "int32"))
    with pytest.raises(ValueError, match=re.escape("`label` must be a batch of rows (a tensor of rank >= 1). "
                                                   "Received: label.shape=().")):
        check_batch_not_empty("label", np.int32(3))


def test_check_batch_size_compares_the_first_axis():
    import keras

    from keras_attn.checks import check_batch_size

    labels = np.zeros((3,), "int32")
    assert check_batch_size("label", labels, 3, "One per row.") is labels
    assert check_batch_size("label", labels, keras.ops.convert_to_tensor(3), "One per row.") is labels
    with pytest.raises(ValueError, match=re.escape(
            "One per row. Received: label with batch size 3, expected 2.")):
        check_batch_size("label", labels, np.int64(2), "One per row.")
    with pytest.raises(ValueError, match=r"batch size 2, expected 3\."):
        check_batch_size("image", np.zeros((2, 4, 4)), 3, "One per row.")
    scalar = np.int32(1)  # no batch axis: left to the caller's shape checks
    # A functional trace's unknown batch: nothing to compare yet (it gave a
    # TypeError from int(None) where the value's own batch was static).
    assert check_batch_size("label", labels, None, "One per row.") is labels
    assert check_batch_size("label", scalar, 2, "One per row.") is scalar


@pytest.mark.requires_tensorflow
def test_check_batch_not_empty_in_the_graph_gives_the_run_time_shape():
    # A batch size known only at run time (a serving signature): the check
    # runs in the graph, static sizes as text and unknown ones as values.
    import tensorflow as tf

    from keras_attn.checks import check_batch_not_empty

    check = tf.function(lambda x: check_batch_not_empty("image", x) + 1,
                        input_signature=[tf.TensorSpec((None, None, 4), tf.int32)])
    np.testing.assert_array_equal(check(tf.zeros((1, 2, 4), tf.int32)), np.ones((1, 2, 4)))
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(
            "Received: image.shape=] [(] [0] [, ] [2] [, 4).]")):
        check(tf.zeros((0, 2, 4), tf.int32))


def test_check_int32_ids_refuses_what_a_cast_would_wrap_or_truncate():
    import keras

    from keras_attn.checks import check_int32_ids

    ids = check_int32_ids("prompt", np.array([[1, 2**31 - 1]], "int64"))
    assert keras.backend.standardize_dtype(ids.dtype) == "int32"
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(ids), [[1, 2**31 - 1]])
    for bad, low, high in (([[1, 2**32 + 5]], 1, 2**32 + 5), ([[-(2**31) - 1, 0]], -(2**31) - 1, 0)):
        with pytest.raises(ValueError, match=re.escape(
                "`prompt` must hold ids that fit int32, the dtype the model reads them in (a cast "
                f"would wrap larger ones). Received: ids from {low} to {high}.")):
            check_int32_ids("prompt", np.array(bad, "int64"))
    with pytest.raises(ValueError, match=r"`prompt` must hold integer ids .*Received dtype float64"):
        check_int32_ids("prompt", np.array([[49.9]]))


@pytest.mark.requires_tensorflow
def test_check_int32_ids_in_the_graph():
    import tensorflow as tf

    from keras_attn.checks import check_int32_ids

    check = tf.function(lambda x: check_int32_ids("source", x),
                        input_signature=[tf.TensorSpec((None, None), tf.int64)])
    np.testing.assert_array_equal(check(tf.constant([[3, 4]], tf.int64)), [[3, 4]])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`source` must hold ids that fit int32"):
        check(tf.constant([[3, 2**32 + 5]], tf.int64))
