"""Megatron-style sharding layouts of keras_attn models for `keras.distribution`.

Query/key/value and feed-forward intermediate kernels split their outputs, the attention and
feed-forward output kernels their inputs; the rest is replicated (docs/guides/distribution.md).
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
    """The `keras.distribution.LayoutMap` sharding keras_attn kernels over a mesh axis.

    Args:
        device_mesh: a `keras.distribution.DeviceMesh`, e.g. axes ("batch", "model").
        model_dim: the mesh axis the kernels are split over.

    Returns:
        `keras.distribution.LayoutMap` for `keras.distribution.ModelParallel`.

    Raises:
        ValueError: if `model_dim` is not an axis of `device_mesh`.

    Example:
    >>> import keras
    >>> from keras_attn.distribution import layout_map
    >>> devices = keras.distribution.list_devices()[:1]
    >>> mesh = keras.distribution.DeviceMesh((1, 1), ["batch", "model"], devices)
    >>> layouts = layout_map(mesh)
    >>> layouts["decoder_layer_0/feedforward_intermediate/kernel"].axes
    (None, 'model')

    Reference:
        Shoeybi et al. 2019, "Megatron-LM" (column- then row-split projections).
    """
    axes = tuple(device_mesh.axis_names)
    require(model_dim in axes, "model_dim", model_dim, f"an axis of the device mesh, one of {axes}")
    layouts = keras.distribution.LayoutMap(device_mesh)
    for pattern, axes in KERNEL_LAYOUTS.items():
        layouts[pattern] = tuple(model_dim if axis == "model" else axis for axis in axes)
    return layouts
