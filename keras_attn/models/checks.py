"""The builders' argument checks now live in `keras_attn.checks`, the one home
of argument checks (importable from layers, generation and export alike);
this module re-exports them for imports not yet updated."""

from keras_attn.checks import check_heads_divide, check_sizes  # noqa: F401
