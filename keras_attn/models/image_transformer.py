"""The Image Transformer (Parmar et al. 2018): image generation and super
resolution over sequences of channel intensities with local self-attention.

Layout shared with `keras_attn.preprocessing.images`: an H x W x C image is
the raster sequence of its H * W * C channel intensities (ids 0..255); the
decoder reads it shifted right by one behind the start token 256,

    decoder_tokens = [START_TOKEN, x_0, ..., x_{n-2}],   targets = [x_0, ..., x_{n-1}]

and predicts a 256-way distribution for every intensity (`logits[:, t]` is
the distribution of `x_t` given `x_0 .. x_{t-1}` and the conditioning).
"""

import keras

from keras_attn.checks import (
    check_bool,
    check_heads_divide,
    check_image_size,
    check_rate,
    check_sizes,
    require,
)
from keras_attn.layers import (
    LocalBlockAttention,
    LowResolutionBlockSums,
    LowResolutionEmbedding,
    LowResolutionLogitBias,
    PixelEmbedding,
    Projection,
    SequenceDelay,
    TokenEmbedding,
    TransformerDecoder,
    TransformerEncoder,
)
from keras_attn.layers.low_resolution_raster import INTERPOLATIONS

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
    """Builds the Image Transformer for unconditional or class-conditional
    image generation, as a functional `keras.Model`.

    The decoder-only model of the paper's 1D local variant: channel
    intensities in raster order, embedded with channel-specific tables and
    2D positions (`PixelEmbedding`), a stack of `TransformerDecoder` blocks
    whose self-attention is causal 1D `LocalBlockAttention` (query blocks
    of `block_size` intensities, each attending to itself up to the query
    and to the `memory_flange` intensities before the block), and a 256-way
    softmax per intensity.

    With `num_classes`, a learned class embedding (one D-vector per class)
    is added to the input representation at every position, as the paper
    conditions CIFAR-10 generation on the class; without it the model is
    unconditional. Generate with `keras_attn.generation.sample(model,
    prompt=[[START_TOKEN]] * B, max_length=H * W * C + 1, seed=...,
    inputs={"class_label": labels})` and drop the first token: the layers
    are those `CachedDecoder` replays one position at a time. The
    self-attention caches are rolling (`LocalBlockAttention(rolling_cache=
    True)`): each holds the last `block_size + memory_flange` positions, not
    the whole image.

    Defaults are sized for a CPU: D 128, 4 blocks, 4 heads, d_ff 256, and a
    query block of one image row (W * C = 96 intensities for 32x32 RGB)
    with a flange of one row, the paper's 1D local setting (query block 256,
    memory 512 on CIFAR-10) scaled down. The paper's CIFAR-10 model is about
    `num_layers=12, hidden_dim=512, intermediate_dim=2048, num_heads=8,
    block_size=256, memory_flange=256`.

    Layer names: `decoder_embedding`, `class_embedding` (conditional),
    `decoder_embedding_dropout`, `decoder_layer_<i>` (with
    `self_attention` inside), `decoder_final_norm` (pre-norm) and `logits`.

    Args:
        image_size: output side (int) or (height, width).
        channels: colour channels (3).
        num_classes: number of classes for class-conditional generation, or
            None for an unconditional model.
        num_layers: N decoder blocks.
        hidden_dim: D (divisible by `num_heads`, and by 4 for sinusoidal
            positions).
        num_heads: H.
        intermediate_dim: feed-forward width d_ff.
        block_size: query block length in intensities; default one image
            row (width * channels).
        memory_flange: how many intensities before its block a query sees;
            default `block_size`.
        dropout: rate of the embedding, residual and attention dropouts.
        position: "sinusoidal" or "learned" 2D positions.
        normalize_first: True (default) = pre-norm blocks and a final layer
            norm (as tensor2tensor trains the Image Transformer); False =
            post-norm.
        name: model name.

    Returns:
        `keras.Model` with inputs `decoder_tokens` (B, T) int32 (ids 0..256,
        T <= H * W * C; the shifted target sequence) and, when
        `num_classes` is set, `class_label` (B,) int32; output logits (B, T,
        256) float32 (also under mixed precision).

    Raises:
        ValueError: on sizes that are not positive integers (a negative
            `memory_flange`), `hidden_dim` not divisible by `num_heads` (or
            by 4 with sinusoidal positions), `dropout` outside [0, 1).

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
        Parmar et al. 2018, "Image Transformer": section 3.1 (channel
        intensities as categories, channel-specific embeddings, 2D
        positions), 3.2 (local 1D self-attention), 4 (inference), 5.1
        (unconditional and class-conditional CIFAR-10 generation).
    """
    height, width = _check_arguments(
        image_size,
        hidden_dim,
        num_heads,
        dropout,
        block_size,
        num_layers=num_layers,
        intermediate_dim=intermediate_dim,
        channels=channels,
        num_classes=num_classes,
    )
    block_size, memory_flange = _local_window(block_size, memory_flange, width * channels)

    decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
    inputs = {"decoder_tokens": decoder_tokens}
    x = PixelEmbedding(
        NUM_INTENSITIES + 1,
        hidden_dim,
        image_size=(height, width),
        channels=channels,
        position=position,
        scale_token_embeddings=True,
        name="decoder_embedding",
    )(decoder_tokens)
    if num_classes is not None:
        class_label = keras.Input((), dtype="int32", name="class_label")
        inputs["class_label"] = class_label
        condition = TokenEmbedding(num_classes, hidden_dim, name="class_embedding")(class_label)
        condition = keras.layers.Reshape((1, hidden_dim), name="class_embedding_per_position")(
            condition
        )
        x = keras.layers.Add(name="add_class_embedding")([x, condition])
    logits = _decoder(
        x,
        None,
        num_layers,
        hidden_dim,
        num_heads,
        intermediate_dim,
        block_size,
        memory_flange,
        dropout,
        normalize_first,
    )
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

    An encoder-decoder model (the paper's image-conditioned generation): the
    low-resolution image, as the raster sequence of its channel intensities
    (192 for 8x8 RGB), is embedded like the target (`PixelEmbedding`, its
    own tables and 2D positions) and contextualised by a stack of
    `TransformerEncoder` blocks with full self-attention (a "per-pixel-channel
    representation of the source image"). The decoder is that of
    `image_transformer` (causal 1D `LocalBlockAttention` over the shifted
    high-resolution sequence) with cross-attention to the encoder output in
    every block.

    With `align_positions=True` (default, sinusoidal positions) the
    low-resolution pixels are encoded at the coordinates of the
    high-resolution grid they were averaged from (`coordinate_scale` =
    upscaling factor, see `PixelPositionEncoding`): a decoder query and the
    encoder keys of the low-resolution pixel it refines then carry nearly
    the same position features, so cross-attention can find that pixel from
    the first steps of training instead of learning the change of scale.
    (A choice of this library; the paper does not describe the encoder's
    positions.)

    Sample with `keras_attn.export.super_resolver.super_resolve`
    or `keras_attn.generation.sample(..., inputs={"low_resolution": ...})`.

    Layer names: `encoder_embedding`, `encoder_embedding_dropout`,
    `encoder_layer_<i>`, `encoder_final_norm` (pre-norm),
    `low_resolution_block_sums`, `left_intensities`, `previous_block_sums`,
    `low_resolution_embedding` and
    `add_low_resolution_embedding`, `low_resolution_logit_bias`, and the
    decoder's names as in `image_transformer`.

    Args:
        low_resolution_size: input side (int) or (height, width).
        image_size: output side (int) or (height, width).
        channels: colour channels (3).
        num_encoder_layers: encoder blocks over the low-resolution image.
        num_layers: decoder blocks.
        hidden_dim: as in `image_transformer`, as are `num_heads`,
            `intermediate_dim`, `block_size`, `memory_flange`, `dropout`,
            `position`, `normalize_first` and `name` (shared by encoder and
            decoder).
        align_positions: place the low-resolution pixels on the
            high-resolution grid in the position encoding (sinusoidal
            positions only; ignored for learned ones).
        low_resolution_embedding: "bicubic" (default), "nearest" or None.
            Adds to every decoder position the embedding of the
            low-resolution intensity there (`LowResolutionEmbedding`: the
            covering pixel, or the bicubic upsampling), beside
            cross-attention; None = cross-attention only (the paper's
            model). Measured on CIFAR-10 (examples/super_resolution):
            without it the samples ignore the input after an hour of CPU
            training, with it they follow the input from the first minutes.
        low_resolution_logit_bias: "bicubic" (default), "nearest" or None.
            Adds to the logits a learned log-prior over each intensity's
            offset from the low-resolution value at its position
            (`LowResolutionLogitBias`, layer `low_resolution_logit_bias`).
        low_resolution_prior_scale: the Laplace scale, in intensity levels,
            that prior starts from (`prior_scale`); None = zeros.
        low_resolution_consistency: the logit bias counts its offsets from
            the value that keeps each 4x4 block consistent with the input
            given the intensities generated so far (`LowResolutionBlockSums`,
            layer `low_resolution_block_sums`) instead of the interpolated
            value alone. Default True. (Measured on CIFAR-10, 300 steps: 5.19
            bits/dim; giving the embedding that value too: 5.24; neither:
            5.33.)
        low_resolution_channel_residual: the logit bias counts the offsets
            of a pixel's second and later channels from the interpolated
            value plus the residual of the pixel's previous channel
            (`LowResolutionRaster.previous_channel_values`): colours of
            natural images move together. Default True.
        low_resolution_max_correction: None (default), or a bound in
            intensity levels on the consistency correction of one pixel
            (`LowResolutionLogitBias(max_correction=...)`).
        low_resolution_left_residual: with consistency, the logit bias
            counts the offsets of a pixel's first channel (of every channel
            without the channel residual) from the consistent value plus
            0.75 times the residual of the pixel to its left
            (`LowResolutionRaster.left_residual_values`; the left intensity
            comes from the decoder input through `SequenceDelay`, layer
            `left_intensities`, a cached layer of C - 1 tokens). Default
            False: measured on CIFAR-10 (200 steps) it lowers bits/dim by
            0.11 but its samples contradict the input more (consistency
            at T = 0.8 35.2 dB instead of 37.6, with the channel
            consistency 37.3 instead of 42.0).
        low_resolution_channel_consistency: with consistency and the
            channel residual, a pixel's second and later channels count
            from their own consistent value plus the previous channel's
            residual from its consistent value
            (`LowResolutionRaster.previous_channel_consistent_values`; the
            block sums one position back come through `SequenceDelay`,
            layer `previous_block_sums`), so every channel is steered to
            its block's average, not only the first. Default True.
            (Measured on CIFAR-10, 200 steps, T = 0.8: consistency 42.0 dB
            instead of 37.6, PSNR 19.65 instead of 19.70 dB, 4.387
            bits/dim instead of 4.342.)

    Returns:
        `keras.Model` with inputs `low_resolution` (B, h * w * C) int32
        (0..255, raster order of the low-resolution image) and
        `decoder_tokens` (B, T) int32 (ids 0..256, the shifted
        high-resolution sequence, T <= H * W * C); output logits (B, T, 256)
        float32.

    Raises:
        ValueError: as `image_transformer`; on flags that are not bools;
            a `low_resolution_embedding` or `low_resolution_logit_bias`
            not "nearest", "bicubic" or None; image sides that are not
            multiples of the low-resolution ones where a part needs it
            (one factor for both with `align_positions`); a
            `low_resolution_left_residual` without the consistency and the
            logit bias it corrects.

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
        Parmar et al. 2018, "Image Transformer": sections 3.1-3.2 (encoder
        and decoder), 5.2 (4x super resolution, 8x8 -> 32x32).
    """
    height, width = _check_arguments(
        image_size,
        hidden_dim,
        num_heads,
        dropout,
        block_size,
        num_encoder_layers=num_encoder_layers,
        num_layers=num_layers,
        intermediate_dim=intermediate_dim,
        channels=channels,
    )
    low_height, low_width = _check_low_resolution_parts(
        low_resolution_size,
        (height, width),
        position,
        low_resolution_embedding,
        low_resolution_logit_bias,
        dict(
            align_positions=align_positions,
            low_resolution_consistency=low_resolution_consistency,
            low_resolution_channel_residual=low_resolution_channel_residual,
            low_resolution_left_residual=low_resolution_left_residual,
            low_resolution_channel_consistency=low_resolution_channel_consistency,
        ),
    )
    block_size, memory_flange = _local_window(block_size, memory_flange, width * channels)

    low_resolution = keras.Input(
        (low_height * low_width * channels,), dtype="int32", name="low_resolution"
    )
    decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
    e = _low_resolution_encoder(
        low_resolution,
        (low_height, low_width),
        (height, width),
        channels,
        num_encoder_layers,
        hidden_dim,
        num_heads,
        intermediate_dim,
        dropout,
        position,
        normalize_first,
        align_positions,
    )

    x = PixelEmbedding(
        NUM_INTENSITIES + 1,
        hidden_dim,
        image_size=(height, width),
        channels=channels,
        position=position,
        scale_token_embeddings=True,
        name="decoder_embedding",
    )(decoder_tokens)
    if low_resolution_embedding is not None:
        covering = LowResolutionEmbedding(
            hidden_dim,
            image_size=(height, width),
            low_resolution_size=(low_height, low_width),
            channels=channels,
            num_intensities=NUM_INTENSITIES,
            interpolation=low_resolution_embedding,
            name="low_resolution_embedding",
        )(decoder_tokens, low_resolution)
        x = keras.layers.Add(name="add_low_resolution_embedding")([x, covering])
    logits = _decoder(
        x,
        e,
        num_layers,
        hidden_dim,
        num_heads,
        intermediate_dim,
        block_size,
        memory_flange,
        dropout,
        normalize_first,
    )
    if low_resolution_logit_bias is not None:
        block_sums = None
        if low_resolution_consistency:
            block_sums = LowResolutionBlockSums(
                image_size=(height, width),
                low_resolution_size=(low_height, low_width),
                channels=channels,
                num_intensities=NUM_INTENSITIES,
                dtype="float32",
                name="low_resolution_block_sums",
            )(decoder_tokens)
        left_intensities = None
        if low_resolution_consistency and low_resolution_left_residual:
            # x[p - C] = the decoder input at p - (C - 1).
            left_intensities = (
                decoder_tokens
                if channels == 1
                else SequenceDelay(channels - 1, dtype="int32", name="left_intensities")(
                    decoder_tokens
                )
            )
        previous_block_sums = None
        if (
            low_resolution_consistency
            and low_resolution_channel_residual
            and low_resolution_channel_consistency
        ):
            previous_block_sums = SequenceDelay(1, dtype="float32", name="previous_block_sums")(
                block_sums
            )
        logits = LowResolutionLogitBias(
            image_size=(height, width),
            low_resolution_size=(low_height, low_width),
            channels=channels,
            num_intensities=NUM_INTENSITIES,
            interpolation=low_resolution_logit_bias,
            prior_scale=low_resolution_prior_scale,
            max_correction=low_resolution_max_correction,
            dtype="float32",
            name="low_resolution_logit_bias",
        )(
            logits,
            low_resolution,
            block_sums=block_sums,
            previous_intensities=decoder_tokens if low_resolution_channel_residual else None,
            left_intensities=left_intensities,
            previous_block_sums=previous_block_sums,
        )
    return keras.Model(
        {"low_resolution": low_resolution, "decoder_tokens": decoder_tokens}, logits, name=name
    )


def _check_low_resolution_parts(
    low_resolution_size, image_size, position, embedding, logit_bias, flags
):
    """`super_resolution_transformer`'s own argument checks (see its
    Raises); returns the low-resolution (height, width)."""
    (low_height, low_width), (height, width) = (
        check_image_size(low_resolution_size, "low_resolution_size"),
        image_size,
    )
    for flag, value in flags.items():  # read with `if`: "False" would switch a part on
        check_bool(None, flag, value, "see the docstring of super_resolution_transformer")
    for name, value in (
        ("low_resolution_embedding", embedding),
        ("low_resolution_logit_bias", logit_bias),
    ):
        require(
            value is None or value in INTERPOLATIONS,
            name,
            value,
            f"one of {INTERPOLATIONS} (how the low-resolution value is read) or None",
        )
    align = flags["align_positions"] and position == "sinusoidal"
    needing = [
        part
        for part, on in (
            ("align_positions", align),
            ("low_resolution_embedding", embedding is not None),
            ("low_resolution_logit_bias", logit_bias is not None),
        )
        if on
    ]
    one_factor = not (
        height % low_height
        or width % low_width
        or align
        and height // low_height != width // low_width
    )
    require(
        one_factor or not needing,
        "image_size",
        (height, width),
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


def _low_resolution_encoder(
    low_resolution,
    low_resolution_size,
    image_size,
    channels,
    num_layers,
    hidden_dim,
    num_heads,
    intermediate_dim,
    dropout,
    position,
    normalize_first,
    align_positions,
):
    """The encoder of `super_resolution_transformer`: the low-resolution
    intensities (B, h * w * C) -> (B, h * w * C, hidden_dim)."""
    (low_height, low_width), height = low_resolution_size, image_size[0]
    # Checked by `_check_low_resolution_parts`: one upscaling factor.
    coordinate_scale = height // low_height if align_positions and position == "sinusoidal" else 1
    e = PixelEmbedding(
        NUM_INTENSITIES,
        hidden_dim,
        image_size=(low_height, low_width),
        channels=channels,
        position=position,
        scale_token_embeddings=True,
        coordinate_scale=coordinate_scale,
        name="encoder_embedding",
    )(low_resolution)
    e = keras.layers.Dropout(dropout, name="encoder_embedding_dropout")(e)
    for i in range(num_layers):
        e = TransformerEncoder(
            intermediate_dim=intermediate_dim,
            num_heads=num_heads,
            dropout=dropout,
            normalize_first=normalize_first,
            name=f"encoder_layer_{i}",
        )(e)
    if normalize_first:
        e = keras.layers.LayerNormalization(epsilon=1e-5, name="encoder_final_norm")(e)
    return e


def _decoder(
    x,
    encoder_outputs,
    num_layers,
    hidden_dim,
    num_heads,
    intermediate_dim,
    block_size,
    memory_flange,
    dropout,
    normalize_first,
):
    x = keras.layers.Dropout(dropout, name="decoder_embedding_dropout")(x)
    for i in range(num_layers):
        attention = LocalBlockAttention(
            num_heads=num_heads,
            key_dim=hidden_dim // num_heads,
            block_size=block_size,
            memory_flange=memory_flange,
            dropout=dropout,
            rolling_cache=True,
            name="self_attention",
        )
        block = TransformerDecoder(
            intermediate_dim=intermediate_dim,
            num_heads=num_heads,
            dropout=dropout,
            normalize_first=normalize_first,
            self_attention=attention,
            name=f"decoder_layer_{i}",
        )
        x = block(x) if encoder_outputs is None else block(x, encoder_outputs)
    if normalize_first:
        x = keras.layers.LayerNormalization(epsilon=1e-5, name="decoder_final_norm")(x)
    return Projection(NUM_INTENSITIES, dtype="float32", name="logits")(x)


def _check_arguments(
    image_size, hidden_dim, num_heads, dropout, block_size, num_classes=None, **sizes
):
    """The argument checks both builders share; returns (height, width).
    `memory_flange` and `position` are refused by the layers they make."""
    optional = {"num_classes": num_classes, "block_size": block_size}
    check_sizes(
        hidden_dim=hidden_dim,
        num_heads=num_heads,
        **sizes,
        **{name: v for name, v in optional.items() if v is not None},
    )
    check_heads_divide(hidden_dim, num_heads)
    check_rate(None, "dropout", dropout)
    return check_image_size(image_size)


def _local_window(block_size, memory_flange, row_length):
    block_size = row_length if block_size is None else block_size
    return block_size, block_size if memory_flange is None else memory_flange
