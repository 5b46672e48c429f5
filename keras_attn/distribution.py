"""Sharding layouts of keras_attn models for `keras.distribution`.

`keras.distribution.DataParallel` needs nothing from a model: every
variable is replicated and each device gets a slice of the batch. Model
parallelism (`keras.distribution.ModelParallel`) needs a `LayoutMap` that
says how each variable is split over the device mesh; `layout_map` gives
the Megatron-style split (Shoeybi et al. 2019) of the blocks built by
`TransformerEncoder` / `TransformerDecoder` and the attention layers:

* the query/key/value projections and the feed-forward intermediate
  kernel split their output features over `model_dim`;
* the attention output and feed-forward output kernels split their input
  features over `model_dim`, so each device's partial sums meet in one
  reduction per sub-block;
* everything else (embeddings, norms, biases, relative-position tables) is
  replicated, and the batch is split over `batch_dim`.

XLA inserts the communication (GSPMD); results equal one device's up to
float rounding (tests/test_distribution.py, JAX with two host devices).
"""

import keras

from keras_attn.checks import require

# Variable path patterns (regular expressions that must match the whole
# `variable.path`, as LayoutMap does) -> the layout of their two axes.
_COLUMN = (None, "model")  # split the output features
_ROW = ("model", None)  # split the input features
KERNEL_LAYOUTS = {
    r".*/(query|key|value|query_key_value|key_value)/kernel": _COLUMN,
    r".*/feedforward_intermediate/kernel": _COLUMN,
    r".*/attention_output/kernel": _ROW,
    r".*/feedforward_output/kernel": _ROW,
}


def layout_map(device_mesh, model_dim="model"):
    """The `keras.distribution.LayoutMap` that shards keras_attn blocks'
    kernels over one axis of a device mesh.

    Args:
        device_mesh: a `keras.distribution.DeviceMesh`, e.g. of shape
            (data_parallel, model_parallel) with axis names
            ("batch", "model").
        model_dim: the mesh axis the kernels are split over.

    Returns:
        `keras.distribution.LayoutMap` for
        `keras.distribution.ModelParallel(layout_map=..., batch_dim_name=...)`.

    Raises:
        ValueError: if `model_dim` is not an axis of `device_mesh`.

    Example:
    >>> import keras
    >>> from keras_attn.distribution import layout_map
    >>> mesh = keras.distribution.DeviceMesh(
    ...     (1, 1), ["batch", "model"], keras.distribution.list_devices()[:1])
    >>> layouts = layout_map(mesh)
    >>> layouts["decoder_layer_0/feedforward_intermediate/kernel"].axes
    (None, 'model')

    Reference:
        Shoeybi et al. 2019, "Megatron-LM" (column- then row-split
        projections); keras-hub backbones' `get_layout_map` do the same
        for their models.
    """
    axes = tuple(device_mesh.axis_names)
    require(model_dim in axes, "model_dim", model_dim, f"an axis of the device mesh, one of {axes}")
    layouts = keras.distribution.LayoutMap(device_mesh)
    for pattern, axes in KERNEL_LAYOUTS.items():
        layouts[pattern] = tuple(model_dim if axis == "model" else axis for axis in axes)
    return layouts
