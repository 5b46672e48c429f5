"""Generation: greedy search, sampling (temperature, top-k, top-p) and beam
search over cached decoders, with `keras.ops` loops that compile under XLA
(`compile_generation`: `tf.function(jit_compile=True)` on TensorFlow,
`jax.jit` with the weights passed as state on JAX).

`CachedDecoder` adapts any functional keras_attn model (decoder-only or
encoder-decoder, every self-attention type) to position-by-position
decoding with caches. It knows no layer classes: a layer opts in by what its
`call` declares (a cache: `init_cache` and `cache` / `cache_index`
arguments; a position: `start_index`), so your own layers decode too (the
protocol is in `CachedDecoder`'s docstring); `RecomputingDecoder` is the recompute-everything
reference; both are `Decoder`s (the protocol the strategies run, with the
beam bookkeeping written once). The strategies take either a model or a
decoder.
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
