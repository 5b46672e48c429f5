"""Issue 6: the constructors of the attention layers, the blocks and the
embeddings refuse a bad argument when the layer is made (a clear ValueError:
what was received, what was expected, how to fix it): sizes, block sizes,
dropout, and flags and seeds that would otherwise be read as truthy or
refused only at the first training call. Their calls:
test_bad_input.py and test_bad_embedding_input.py.
"""

import numpy as np
import pytest

from keras_attn.layers import (
    LocalBlockAttention,
    MultiHeadAttention,
    MultiHeadSelfAttention,
    RelativeGlobalAttention,
    TokenAndPositionEmbedding,
    TransformerDecoder,
    TransformerEncoder,
)
from keras_attn.models.image_transformer import PixelEmbedding


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: MultiHeadSelfAttention(num_heads=2, key_dim=0),
            r"key_dim` must be a positive integer\. Received: key_dim=0",
        ),
        (lambda: MultiHeadSelfAttention(num_heads=2, key_dim=2.5), r"Received: key_dim=2\.5"),
        (lambda: MultiHeadAttention(num_heads=2, key_dim=-4), r"Received: key_dim=-4"),
        (
            lambda: LocalBlockAttention(2, 4, block_size=0),
            r"`block_size` must be an int \(1D\) or a pair of ints \(2D\), each >= 1\. Received: block_size=0\.",
        ),
        (
            lambda: LocalBlockAttention(2, 4, block_size=(0, 3)),
            r"`block_size` must be .*each >= 1\. Received: block_size=\(0, 3\)",
        ),
        (
            lambda: LocalBlockAttention(2, 4, block_size=4, memory_flange=-1),
            r"`memory_flange` must be .*each >= 0\. Received: memory_flange=-1",
        ),
        (
            lambda: RelativeGlobalAttention(2, 4, max_relative_position=0),
            r"`max_relative_position` must be a positive integer\. Received: max_relative_position=0",
        ),
        (
            lambda: RelativeGlobalAttention(2, 4, max_relative_position=3, value_dim=0),
            r"value_dim` must be a positive integer",
        ),
        (
            lambda: MultiHeadSelfAttention(num_heads=2, key_dim=4, dropout=-0.1),
            r"`dropout` must be a number in \[0, 1\)",
        ),
        # Flags and seeds: refused when the layer is made, not read as truthy
        # ("False" would switch a part on) or refused at the first training call.
        (
            lambda: MultiHeadSelfAttention(2, 4, use_bias="False"),
            r"^MultiHeadSelfAttention: `use_bias` must be True or False \(True = the projections have biases\)\. Received: use_bias='False'\.$",
        ),
        (
            lambda: RelativeGlobalAttention(2, 4, 3, heads_share_relative_embedding=np.True_),
            r"Received: heads_share_relative_embedding=np\.True_\. Pass `heads_share_relative_embedding=bool\(heads_share_relative_embedding\)`\.$",
        ),
        (
            lambda: MultiHeadAttention(2, 4, dropout=0.1, seed=1.5),
            r"^MultiHeadAttention: `seed` must be None or an int \(the dropout seed\)\. Received: seed=1\.5\.$",
        ),
        (
            lambda: TransformerEncoder(8, num_heads=2, seed="x"),
            r"^TransformerEncoder: `seed` must be None or an int .*Received: seed='x'\.$",
        ),
        (
            lambda: TransformerDecoder(8, num_heads=2, seed=np.int64(3)),
            r"Received: seed=np\.int64\(3\)\. Pass a Python int: `seed=int\(seed\)`\.$",
        ),
        (
            lambda: TokenAndPositionEmbedding(10, 8, 6, mask_zero="False"),
            r"^TokenAndPositionEmbedding: `mask_zero` must be True or False \(True = id 0 is padding\)\. Received: mask_zero='False'\.$",
        ),
        (
            lambda: TokenAndPositionEmbedding(10, 8, 6, scale_token_embeddings=1),
            r"`scale_token_embeddings` must be True or False .*Received: scale_token_embeddings=1\.$",
        ),
        (
            lambda: TokenAndPositionEmbedding(10, 8, "x", position="sinusoidal"),
            r"`sequence_length` must be a positive integer\. Received: sequence_length='x'\.$",
        ),
        (
            lambda: PixelEmbedding(257, 8, image_size=2, scale_token_embeddings=None),
            r"^PixelEmbedding: `scale_token_embeddings` must be True or False .*Received: scale_token_embeddings=None\.$",
        ),
    ],
)
def test_constructor_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()
