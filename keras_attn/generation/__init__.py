"""Generation: greedy search, sampling and beam search over cached decoders, in `keras.ops`
loops that compile under XLA (`compile_generation`). `CachedDecoder` runs any functional
keras_attn model position by position, your own layers too (docs/guides/decoding.md).
"""

from keras_attn.generation.cached_decoder import CachedDecoder
from keras_attn.generation.compiling import compile_generation
from keras_attn.generation.decoder import Decoder
from keras_attn.generation.recomputing_decoder import RecomputingDecoder
from keras_attn.generation.sampling import sample, top_k_filter, top_p_filter
from keras_attn.generation.search import beam_search, greedy_search, length_penalty

__all__ = [
    "CachedDecoder",
    "Decoder",
    "RecomputingDecoder",
    "beam_search",
    "compile_generation",
    "greedy_search",
    "length_penalty",
    "sample",
    "top_k_filter",
    "top_p_filter",
]
