"""What the model builders share: their argument checks and their stacks of blocks."""

from keras_attn.checks import check_heads_divide, check_rate, check_sizes
from keras_attn.layers.layer_norm import LayerNorm


def check_model_arguments(hidden_dim, num_heads, dropout, **sizes):
    """Refuses a non-positive size, a `num_heads` not dividing `hidden_dim`, a bad `dropout`."""
    check_sizes(**sizes, hidden_dim=hidden_dim, num_heads=num_heads)
    check_heads_divide(hidden_dim, num_heads)
    check_rate(None, "dropout", dropout)


def block_arguments(intermediate_dim, num_heads, dropout, normalize_first):
    """The keyword arguments all blocks of a model share."""
    return dict(
        intermediate_dim=intermediate_dim,
        num_heads=num_heads,
        dropout=dropout,
        normalize_first=normalize_first,
    )


def stack_blocks(
    x, block, prefix, num_layers, blocks, encoder_outputs=None, attention=None, final_norm=None
):
    """`num_layers` `block`s named `{prefix}_layer_<i>` over `x`, then (pre-norm) a final norm.

    `blocks` holds the blocks' keyword arguments (with `normalize_first`); `attention()`, when
    given, builds each block's self-attention; `final_norm` defaults to `{prefix}_final_norm`.
    """
    for i in range(num_layers):
        self_attention = {} if attention is None else {"self_attention": attention()}
        layer = block(**blocks, **self_attention, name=f"{prefix}_layer_{i}")
        x = layer(x) if encoder_outputs is None else layer(x, encoder_outputs)
    if blocks["normalize_first"]:
        name = final_norm or f"{prefix}_final_norm"
        x = LayerNorm(epsilon=1e-5, name=name)(x)
    return x
