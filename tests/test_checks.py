import pytest

from keras_attn.checks import check_heads_divide, check_sizes
from keras_attn.models import music_transformer, translation_transformer


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
