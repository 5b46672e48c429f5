"""The one factory of "a self-attention layer of kind X" (and blocks around
it) that the layer, reliability and generation tests share, and references
for them built from `tests/references.py` (NumPy, explicit loops)."""

import keras
import numpy as np

from keras_attn.layers import (
    LocalBlockAttention,
    MultiHeadSelfAttention,
    RelativeGlobalAttention,
    TransformerDecoder,
    TransformerEncoder,
)
from tests import references

# Every self-attention type of the library. "local" uses blocks of 2 with a
# flange of 1, so sequences of 5 or more cross several windows.
SELF_ATTENTION_KINDS = ("multi_head", "local", "relative")


def self_attention(kind, num_heads=2, key_dim=4, **kwargs):
    """A self-attention layer of `kind` (one of SELF_ATTENTION_KINDS), by
    default with a non-zero output bias (so that "the output of an empty row
    is the bias" is not "the output is 0"); kwargs go to the layer."""
    kwargs.setdefault("bias_initializer", keras.initializers.RandomNormal(stddev=0.5, seed=5))
    if kind == "multi_head":
        return MultiHeadSelfAttention(num_heads=num_heads, key_dim=key_dim, **kwargs)
    if kind == "local":
        kwargs.setdefault("block_size", 2)
        kwargs.setdefault("memory_flange", 1)
        return LocalBlockAttention(num_heads=num_heads, key_dim=key_dim, **kwargs)
    if kind == "relative":
        kwargs.setdefault("max_relative_position", 3)
        return RelativeGlobalAttention(num_heads=num_heads, key_dim=key_dim, **kwargs)
    raise ValueError(kind)


def encoder(kind, intermediate_dim=16, normalize_first=False, **kwargs):
    """A TransformerEncoder whose self-attention is `kind` (kwargs go to it)."""
    return TransformerEncoder(
        intermediate_dim=intermediate_dim,
        normalize_first=normalize_first,
        self_attention=self_attention(kind, **kwargs),
    )


def decoder(kind, intermediate_dim=16, dropout=0.0, seed=None, normalize_first=False, **kwargs):
    """A TransformerDecoder whose self-attention is `kind` (kwargs go to it)."""
    return TransformerDecoder(
        intermediate_dim=intermediate_dim,
        dropout=dropout,
        seed=seed,
        normalize_first=normalize_first,
        self_attention=self_attention(kind, dropout=dropout, seed=seed, **kwargs),
    )


def dense_mask(layer, batch, length, padding=None, attention=None, causal=False):
    """(B, H, T, T) bool: what `layer` lets query t see, pair by pair."""
    mask = references.dense_mask(
        batch, length, length, padding, attention, causal, num_heads=layer.num_heads
    )
    if isinstance(layer, LocalBlockAttention):
        flange = layer.block_size if layer.memory_flange is None else layer.memory_flange
        mask &= references.local_block_mask((length,), layer.block_size, flange, causal)
    return mask


def attention(layer, x, mask):
    """Reference forward pass of a built self-attention layer of any kind:
    (outputs (B, T, D), probabilities (B, H, T, T)), float64."""
    if isinstance(layer, RelativeGlobalAttention):
        return references.relative_global_attention(layer, x, mask)
    return references.multi_head_self_attention(layer, x, mask)


def _feedforward(block, h):
    hidden = np.maximum(references.dense(block._feedforward_intermediate, h), 0.0)
    return references.dense(block._feedforward_output, hidden)


def _sublayer(block, norm, fn, x):
    if block.normalize_first:
        return x + fn(references.layer_norm(norm, x))
    return references.layer_norm(norm, x + fn(x))


def encoder_block(block, x, mask):
    """Reference TransformerEncoder (ReLU, inference) with any self-attention.

    Args:
        block: a built TransformerEncoder; x: (B, T, D); mask: (B, H, T, T).
    """
    x = np.asarray(x, np.float64)
    layer = block._self_attention_layer
    x = _sublayer(block, block._self_attention_norm, lambda h: attention(layer, h, mask)[0], x)
    return _sublayer(block, block._feedforward_norm, lambda h: _feedforward(block, h), x)


def decoder_block(block, x, self_mask, memory=None, cross_mask=None):
    """Reference TransformerDecoder (ReLU, inference) with any self-attention
    and, when `memory` is given, cross-attention masked by `cross_mask`
    (B, H, T, S)."""
    x = np.asarray(x, np.float64)
    layer = block._self_attention_layer
    x = _sublayer(block, block._self_attention_norm, lambda h: attention(layer, h, self_mask)[0], x)
    if memory is not None:
        cross = block._cross_attention_layer
        x = _sublayer(
            block,
            block._cross_attention_norm,
            lambda h: references.multi_head_cross_attention(cross, h, memory, cross_mask)[0],
            x,
        )
    return _sublayer(block, block._feedforward_norm, lambda h: _feedforward(block, h), x)


def empty_rows(mask):
    """(B, T) bool: queries that see no key under a (B, H, T, S) mask
    (the same for every head here)."""
    return ~mask.any(-1)[:, 0]
