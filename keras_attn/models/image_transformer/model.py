"""The Image Transformer builders: image generation and super resolution.

Layout (raster intensities 0..255 behind the start token 256): docs/guides/image_transformer.md.
"""

import keras

from keras_attn.checks import check_bool, check_image_size, require
from keras_attn.layers import (
    LocalBlockAttention,
    TokenEmbedding,
    TransformerDecoder,
    TransformerEncoder,
)
from keras_attn.layers.projection import Projection
from keras_attn.models._blocks import block_arguments, check_model_arguments, stack_blocks
from keras_attn.models.image_transformer.low_resolution_block_sums import LowResolutionBlockSums
from keras_attn.models.image_transformer.low_resolution_embedding import LowResolutionEmbedding
from keras_attn.models.image_transformer.low_resolution_logit_bias import LowResolutionLogitBias
from keras_attn.models.image_transformer.low_resolution_raster import INTERPOLATIONS
from keras_attn.models.image_transformer.low_resolution_values import LowResolutionValues
from keras_attn.models.image_transformer.pixel_embedding import PixelEmbedding
from keras_attn.models.image_transformer.sequence_delay import SequenceDelay

# The layout's constants live with the layout (re-exported here).
from keras_attn.preprocessing.images import NUM_INTENSITIES, START_TOKEN  # noqa: F401


def image_transformer(
    image_size=32,
    channels=3,
    num_classes=None,
    num_layers=4,
    hidden_dim=128,
    num_heads=4,
    intermediate_dim=256,
    block_size=None,
    memory_flange=None,
    dropout=0.1,
    position="sinusoidal",
    normalize_first=True,
    name="image_transformer",
):
    """Builds the Image Transformer for unconditional or class-conditional image generation.

    The paper's decoder-only 1D local model; architecture, layer names and sampling:
    docs/guides/image_transformer.md. The defaults are sized for a CPU.

    Args:
        image_size: output side (int) or (height, width).
        channels: colour channels.
        num_classes: classes for class-conditional generation, or None (unconditional).
        num_layers: N decoder blocks.
        hidden_dim: D (divisible by `num_heads`, and by 4 for sinusoidal positions).
        num_heads: H.
        intermediate_dim: feed-forward width d_ff.
        block_size: query block length in intensities; default one image row (width * channels).
        memory_flange: intensities before its block a query sees; default `block_size`.
        dropout: rate of the embedding, residual and attention dropouts.
        position: "sinusoidal" or "learned" 2D positions.
        normalize_first: True = pre-norm blocks and a final layer norm; False = post-norm.
        name: model name.

    Returns:
        `keras.Model` with inputs `decoder_tokens` (B, T) int32 (ids 0..256, T <= H * W * C)
        and, with `num_classes`, `class_label` (B,) int32; output logits (B, T, 256) float32.

    Raises:
        ValueError: for a bad size, a `hidden_dim` not divisible as above, a bad `dropout`.

    Example:
    >>> import keras
    >>> from keras_attn.models import image_transformer
    >>> model = image_transformer(image_size=8, num_classes=10, num_layers=1,
    ...                           hidden_dim=32, num_heads=2, intermediate_dim=64)
    >>> logits = model({"decoder_tokens": keras.ops.full((2, 192), 256, "int32"),
    ...                 "class_label": keras.ops.array([3, 5])})
    >>> tuple(logits.shape)
    (2, 192, 256)

    Reference:
        Parmar et al. 2018, "Image Transformer": sections 3.1-3.2, 4 and 5.1.
    """
    classes = {} if num_classes is None else {"num_classes": num_classes}
    check_model_arguments(
        hidden_dim, num_heads, dropout, num_layers=num_layers, channels=channels, **classes
    )
    height, width = check_image_size(image_size)
    window = _local_window(block_size, memory_flange, width * channels)
    blocks = block_arguments(intermediate_dim, num_heads, dropout, normalize_first)
    decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
    inputs = {"decoder_tokens": decoder_tokens}
    x = _decoder_embedding(decoder_tokens, hidden_dim, (height, width), channels, position)
    if num_classes is not None:
        class_label = keras.Input((), dtype="int32", name="class_label")
        inputs["class_label"] = class_label
        condition = TokenEmbedding(num_classes, hidden_dim, name="class_embedding")(class_label)
        condition = keras.layers.Reshape((1, hidden_dim), name="class_embedding_per_position")(
            condition
        )
        x = keras.layers.Add(name="add_class_embedding")([x, condition])
    logits = _decoder(x, None, num_layers, hidden_dim, window, blocks)
    return keras.Model(inputs, logits, name=name)


def super_resolution_transformer(
    low_resolution_size=8,
    image_size=32,
    channels=3,
    num_encoder_layers=2,
    num_layers=4,
    hidden_dim=128,
    num_heads=4,
    intermediate_dim=256,
    block_size=None,
    memory_flange=None,
    dropout=0.1,
    position="sinusoidal",
    normalize_first=True,
    align_positions=True,
    low_resolution_embedding="bicubic",
    low_resolution_logit_bias="bicubic",
    low_resolution_prior_scale=16.0,
    low_resolution_consistency=True,
    low_resolution_channel_residual=True,
    low_resolution_max_correction=None,
    low_resolution_left_residual=False,
    low_resolution_channel_consistency=True,
    name="super_resolution_transformer",
):
    """Builds the Image Transformer for super resolution (e.g. 8x8 -> 32x32).

    The paper's image-conditioned encoder-decoder; the `low_resolution_*` parts (this library's
    additions), layer names and sampling: docs/guides/image_transformer.md.

    Args:
        low_resolution_size: input side (int) or (height, width).
        image_size: output side (int) or (height, width).
        channels: colour channels.
        num_encoder_layers: encoder blocks over the low-resolution image.
        num_layers: decoder blocks.
        hidden_dim: as `image_transformer`'s, and so are the other decoder arguments.
        align_positions: place low-resolution pixels on the high-resolution grid (sinusoidal).
        low_resolution_embedding: "bicubic", "nearest" or None (`LowResolutionEmbedding`).
        low_resolution_logit_bias: "bicubic", "nearest" or None (`LowResolutionLogitBias`).
        low_resolution_prior_scale: the Laplace scale that prior starts from; None = zeros.
        low_resolution_consistency: offsets from the block-consistent value.
        low_resolution_channel_residual: later channels follow the previous one's residual.
        low_resolution_max_correction: None, or a bound on a pixel's consistency correction.
        low_resolution_left_residual: with consistency, follow the left pixel's residual.
        low_resolution_channel_consistency: later channels count from their consistent value.

    Returns:
        `keras.Model` with inputs `low_resolution` (B, h * w * C) int32 and `decoder_tokens`
        (B, T) int32 (T <= H * W * C); output logits (B, T, 256) float32.

    Raises:
        ValueError: as `image_transformer`, or for a bad `low_resolution_*` argument or sides.

    Example:
    >>> import keras
    >>> from keras_attn.models import super_resolution_transformer
    >>> model = super_resolution_transformer(low_resolution_size=2, image_size=8,
    ...     num_encoder_layers=1, num_layers=1, hidden_dim=32, num_heads=2,
    ...     intermediate_dim=64)
    >>> logits = model({"low_resolution": keras.ops.zeros((2, 12), "int32"),
    ...                 "decoder_tokens": keras.ops.full((2, 192), 256, "int32")})
    >>> tuple(logits.shape)
    (2, 192, 256)

    Reference:
        Parmar et al. 2018, "Image Transformer": sections 3.1-3.2 and 5.2.
    """
    check_model_arguments(
        hidden_dim,
        num_heads,
        dropout,
        num_encoder_layers=num_encoder_layers,
        num_layers=num_layers,
        channels=channels,
    )
    height, width = check_image_size(image_size)
    flags = dict(
        align_positions=align_positions,
        low_resolution_consistency=low_resolution_consistency,
        low_resolution_channel_residual=low_resolution_channel_residual,
        low_resolution_left_residual=low_resolution_left_residual,
        low_resolution_channel_consistency=low_resolution_channel_consistency,
    )
    align = align_positions and position == "sinusoidal"
    low_height, low_width = _check_low_resolution_parts(
        low_resolution_size,
        (height, width),
        align,
        low_resolution_embedding,
        low_resolution_logit_bias,
        flags,
    )
    sizes = dict(
        image_size=(height, width),
        low_resolution_size=(low_height, low_width),
        channels=channels,
        num_intensities=NUM_INTENSITIES,
    )
    window = _local_window(block_size, memory_flange, width * channels)
    blocks = block_arguments(intermediate_dim, num_heads, dropout, normalize_first)
    low_resolution = keras.Input(
        (low_height * low_width * channels,), dtype="int32", name="low_resolution"
    )
    decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")

    # The encoder over the low-resolution intensities (B, h * w * C).
    e = PixelEmbedding(
        NUM_INTENSITIES,
        hidden_dim,
        image_size=(low_height, low_width),
        channels=channels,
        position=position,
        scale_token_embeddings=True,
        coordinate_scale=height // low_height if align else 1,  # one factor: checked above
        name="encoder_embedding",
    )(low_resolution)
    e = keras.layers.Dropout(dropout, name="encoder_embedding_dropout")(e)
    e = stack_blocks(e, TransformerEncoder, "encoder", num_encoder_layers, blocks)

    # The low-resolution values at every output position, once per interpolation: they depend
    # on the input image only, so a cached decoder computes them once, not at every step.
    values = {
        interpolation: LowResolutionValues(
            **sizes,
            interpolation=interpolation,
            dtype="float32",
            name=f"low_resolution_{interpolation}",
        )(low_resolution)
        for interpolation in dict.fromkeys((low_resolution_embedding, low_resolution_logit_bias))
        if interpolation is not None
    }
    x = _decoder_embedding(decoder_tokens, hidden_dim, (height, width), channels, position)
    if low_resolution_embedding is not None:
        covering = LowResolutionEmbedding(
            hidden_dim,
            **sizes,
            interpolation=low_resolution_embedding,
            name="low_resolution_embedding",
        )(decoder_tokens, low_resolution, low_resolution_values=values[low_resolution_embedding])
        x = keras.layers.Add(name="add_low_resolution_embedding")([x, covering])
    logits = _decoder(x, e, num_layers, hidden_dim, window, blocks)
    if low_resolution_logit_bias is not None:
        bias = LowResolutionLogitBias(
            **sizes,
            interpolation=low_resolution_logit_bias,
            prior_scale=low_resolution_prior_scale,
            max_correction=low_resolution_max_correction,
            dtype="float32",
            name="low_resolution_logit_bias",
        )
        logits = _add_logit_bias(
            bias,
            logits,
            low_resolution,
            values[low_resolution_logit_bias],
            decoder_tokens,
            sizes,
            flags,
        )
    return keras.Model(
        {"low_resolution": low_resolution, "decoder_tokens": decoder_tokens}, logits, name=name
    )


def _add_logit_bias(bias, logits, low_resolution, values, decoder_tokens, sizes, flags):
    """Calls the `LowResolutionLogitBias` with the optional inputs that `flags` switch on."""
    consistency = flags["low_resolution_consistency"]
    channel_residual = flags["low_resolution_channel_residual"]
    block_sums = left_intensities = previous_block_sums = None
    if consistency:
        block_sums = LowResolutionBlockSums(
            **sizes, dtype="float32", name="low_resolution_block_sums"
        )(decoder_tokens)
    if consistency and flags["low_resolution_left_residual"]:
        # x[p - C] = the decoder input at p - (C - 1).
        delay = sizes["channels"] - 1
        left_intensities = (
            SequenceDelay(delay, dtype="int32", name="left_intensities")(decoder_tokens)
            if delay
            else decoder_tokens
        )
    if consistency and channel_residual and flags["low_resolution_channel_consistency"]:
        previous_block_sums = SequenceDelay(1, dtype="float32", name="previous_block_sums")(
            block_sums
        )
    return bias(
        logits,
        low_resolution,
        block_sums=block_sums,
        previous_intensities=decoder_tokens if channel_residual else None,
        left_intensities=left_intensities,
        previous_block_sums=previous_block_sums,
        low_resolution_values=values,
    )


def _check_low_resolution_parts(
    low_resolution_size, image_size, align, embedding, logit_bias, flags
):
    """`super_resolution_transformer`'s own checks; returns the low-resolution (height, width)."""
    low_height, low_width = check_image_size(low_resolution_size, "low_resolution_size")
    height, width = image_size
    for flag, value in flags.items():  # read with `if`: "False" would switch a part on
        check_bool(None, flag, value, "see the docstring of super_resolution_transformer")
    parts = {"low_resolution_embedding": embedding, "low_resolution_logit_bias": logit_bias}
    for name, value in parts.items():
        ok = value is None or value in INTERPOLATIONS
        expected = f"one of {INTERPOLATIONS} (how the low-resolution value is read) or None"
        require(ok, name, value, expected)
    needing = ["align_positions"] * bool(align)
    needing += [name for name, value in parts.items() if value is not None]
    divides = not (height % low_height or width % low_width)
    one_factor = divides and (not align or height // low_height == width // low_width)
    require(
        one_factor or not needing,
        "image_size",
        image_size,
        f"a multiple of `low_resolution_size`={(low_height, low_width)} on each side (the "
        f"same factor for both sides with align_positions) for {', '.join(needing)}",
    )
    corrected = flags["low_resolution_consistency"] and logit_bias is not None
    require(
        corrected or not flags["low_resolution_left_residual"],
        "low_resolution_left_residual",
        True,
        "False without low_resolution_consistency=True and a `low_resolution_logit_bias` "
        "(it corrects their consistent value)",
    )
    return low_height, low_width


def _decoder_embedding(decoder_tokens, hidden_dim, image_size, channels, position):
    return PixelEmbedding(
        NUM_INTENSITIES + 1,
        hidden_dim,
        image_size=image_size,
        channels=channels,
        position=position,
        scale_token_embeddings=True,
        name="decoder_embedding",
    )(decoder_tokens)


def _decoder(x, encoder_outputs, num_layers, hidden_dim, window, blocks):
    """The decoder blocks over the embedded `x` (B, T, D), then the logits (B, T, 256)."""
    num_heads, dropout = blocks["num_heads"], blocks["dropout"]

    def local_attention():
        return LocalBlockAttention(
            num_heads=num_heads,
            key_dim=hidden_dim // num_heads,
            block_size=window[0],
            memory_flange=window[1],
            dropout=dropout,
            rolling_cache=True,
            name="self_attention",
        )

    x = keras.layers.Dropout(dropout, name="decoder_embedding_dropout")(x)
    x = stack_blocks(
        x, TransformerDecoder, "decoder", num_layers, blocks, encoder_outputs, local_attention
    )
    return Projection(NUM_INTENSITIES, dtype="float32", name="logits")(x)


def _local_window(block_size, memory_flange, row_length):
    block_size = row_length if block_size is None else block_size
    return block_size, block_size if memory_flange is None else memory_flange
