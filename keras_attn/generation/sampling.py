"""Temperature, top-k and nucleus sampling with a stateless, counter-based random generator."""

import numbers

import keras
import numpy as np
from keras import ops

from keras_attn.generation import arguments, decoding

# A temperature below this would flush to 0 in float32 (see `sample`).
_SMALLEST_NORMAL = float(np.finfo(np.float32).tiny)


def sample(
    model,
    prompt,
    max_length,
    seed,
    temperature=1.0,
    top_k=None,
    top_p=None,
    end_token_id=None,
    pad_token_id=0,
    prompt_lengths=None,
    inputs=None,
    suppressed_token_ids=None,
):
    """Generates by sampling each next token from the model's distribution.

    Logits divided by `temperature`, filtered by `top_k` / `top_p`, drawn by Gumbel-max; the same
    seed draws the same tokens eagerly, compiled and exported (docs/guides/decoding.md).

    Args:
        model: a functional `keras.Model` or a decoder object.
        prompt: (B, P) int, right-padded (see `greedy_search`).
        max_length: L, static int >= P (prompt included).
        seed: an int or int tensor of shape () or (2,), or (B, 1) / (B, 2) for one per row.
        temperature: finite number > 0 (or a scalar tensor); < 1 sharpens, > 1 flattens.
        top_k: optional positive int (or int scalar tensor, 0 = all), the most likely kept.
        top_p: optional number in (0, 1] (or a scalar tensor), the nucleus mass kept.
        end_token_id: a row stops after generating it; None = never stop.
        pad_token_id: padding id, written after the end token.
        prompt_lengths: (B,) int; defaults to the non-pad count per row.
        inputs: the model's other inputs by name (e.g. `encoder_tokens`).
        suppressed_token_ids: ids never sampled (see `greedy_search`).

    Returns:
        (B, L) int32 tokens: prompt, samples (end token included), padding.

    Raises:
        ValueError: for a bad `temperature`, `top_k`, `top_p` or `seed`, or as `greedy_search`.

    Example:
    >>> import keras
    >>> from keras_attn.generation import sample
    >>> from keras_attn.models import music_transformer
    >>> lm = music_transformer(40, num_layers=1, hidden_dim=16, num_heads=2,
    ...                        intermediate_dim=32, max_relative_position=8)
    >>> primer = keras.ops.array([[1, 7, 9, 0], [1, 4, 0, 0]])  # right-padded
    >>> tokens = sample(lm, primer, max_length=12, seed=42, top_k=5, top_p=0.9)
    >>> tuple(tokens.shape)
    (2, 12)

    Reference:
        Holtzman et al. 2019, "The Curious Case of Neural Text Degeneration", section 3.1;
        Fan et al. 2018, "Hierarchical Neural Story Generation", section 5.4.
    """
    temperature = arguments.check_control("temperature", temperature)  # traced: in the graph
    top_k = None if top_k is None else arguments.check_control("top_k", top_k)
    top_p = None if top_p is None else arguments.check_control("top_p", top_p)
    arguments.check_seed(seed)
    key = arguments.check_seed_rows(seed_key(seed), prompt)
    arguments.check_max_length(max_length)  # before the keys of its positions need it
    keys = position_keys(key, ops.arange(max_length, dtype="int32"))

    def choose(logits, position):
        return choose_token(logits, position, temperature, keys, top_k, top_p)

    return decoding.token_loop(
        choose,
        model,
        prompt,
        max_length,
        end_token_id,
        pad_token_id,
        prompt_lengths,
        inputs,
        suppressed_token_ids,
    )


def choose_token(logits, position, temperature, keys, top_k=None, top_p=None):
    """The (B,) token `sample` draws at `position` from `logits` (B, V) float32, for checked
    controls (numbers or scalar tensors; None: no filter) and `keys` from `position_keys`."""
    # Largest logit 0 first: a tiny temperature sends the others to -inf, not to +inf (where
    # argmax would pick the first inf); below float32's smallest normal number a temperature
    # would flush to 0 (0 / 0).
    logits = logits - ops.max(logits, axis=-1, keepdims=True)
    logits = logits / ops.maximum(ops.cast(temperature, "float32"), _SMALLEST_NORMAL)
    if top_k is not None:
        logits = _top_k(logits, top_k)
    if top_p is not None:
        logits = _top_p(logits, top_p)
    return ops.argmax(logits + gumbel_noise(keys, position, ops.shape(logits)), axis=-1)


def top_k_filter(logits, k):
    """Keeps the `k` largest logits of each row (ties with the k-th too); the others: `-inf`.

    Args:
        logits: (..., V) float.
        k: positive int, or an int scalar tensor where 0 means no filter; k >= V keeps all.

    Returns:
        Logits of the same shape and dtype.

    Raises:
        ValueError: for a `k` that is not a positive int or an int scalar tensor >= 0.

    Example:
    >>> import keras
    >>> from keras_attn.generation import top_k_filter
    >>> logits = top_k_filter(keras.ops.array([[1.0, 3.0, 2.0]]), 2)
    >>> keras.ops.convert_to_numpy(logits).tolist()
    [[-inf, 3.0, 2.0]]

    Reference:
        Fan et al. 2018, "Hierarchical Neural Story Generation", section 5.4.
    """
    return _top_k(logits, arguments.check_control("top_k", k, in_graph=False))


def _top_k(logits, k):
    vocabulary_size = logits.shape[-1]
    if _is_tensor(k):
        # A run-time k: the k-th largest of a full sort (static shapes: it compiles under XLA),
        # in a conditional that skips it where k keeps every token (0, or >= V).
        k = ops.cast(k, "int32")
        keeps_all = ops.logical_or(k <= 0, k >= ops.shape(logits)[-1])

        def filtered():
            descending = ops.flip(ops.sort(logits, axis=-1), axis=-1)
            threshold = ops.expand_dims(ops.take(descending, k - 1, axis=-1), -1)
            return ops.where(ops.greater_equal(logits, threshold), logits, float("-inf"))

        return ops.cond(keeps_all, lambda: logits, filtered)
    if vocabulary_size is not None and k >= vocabulary_size:
        return logits
    threshold = ops.top_k(logits, k)[0][..., -1:]
    return ops.where(ops.greater_equal(logits, threshold), logits, float("-inf"))


def top_p_filter(logits, p):
    """Keeps the smallest set of most likely tokens whose mass reaches `p`; the others: `-inf`.

    Args:
        logits: (B, V) float (temperature already applied).
        p: a number in (0, 1] or a float scalar tensor; 1 keeps everything.

    Returns:
        (B, V) logits, same dtype.

    Raises:
        ValueError: if a Python `p` is outside (0, 1].

    Example:
    >>> import keras
    >>> from keras_attn.generation import top_p_filter
    >>> probs = keras.ops.array([[0.5, 0.3, 0.15, 0.05]])
    >>> logits = top_p_filter(keras.ops.log(probs), 0.75)
    >>> keras.ops.convert_to_numpy(keras.ops.isfinite(logits)).tolist()  # keeps tokens 0 and 1
    [[True, True, False, False]]

    Reference:
        Holtzman et al. 2019, "The Curious Case of Neural Text Degeneration", section 3.1.
    """
    return _top_p(logits, arguments.check_control("top_p", p, in_graph=False))


def _top_p(logits, p):
    if isinstance(p, numbers.Real):
        return logits if p >= 1.0 else _nucleus(logits, p)
    # A run-time p: in a conditional that skips the filter where p keeps every token (1).
    return ops.cond(ops.cast(p, "float32") >= 1.0, lambda: logits, lambda: _nucleus(logits, p))


def _nucleus(logits, p):
    """`_top_p` for p < 1."""
    # Descending, ties in index order on every backend (argsort is stable; PyTorch's top_k isn't).
    order = ops.argsort(ops.negative(logits), axis=-1)
    sorted_logits = ops.take_along_axis(logits, order, axis=-1)
    probs = ops.softmax(ops.cast(sorted_logits, "float32"), axis=-1)
    mass_before = ops.cumsum(probs, axis=-1) - probs
    keep_sorted = ops.less(mass_before, ops.cast(p, "float32"))
    # Back to vocabulary order: the inverse of the sorting permutation.
    keep = ops.take_along_axis(keep_sorted, ops.argsort(order, axis=-1), axis=-1)
    return ops.where(keep, logits, float("-inf"))


# Stateless noise: 32-bit words held in int32 (two's complement), where addition and
# multiplication wrap as on uint32 and a logical right shift is an arithmetic one with the sign
# bits masked off; every backend has these int32 ops.
_MASK32 = 0xFFFFFFFF


def _word(value):
    """A Python int as the int32 tensor of its low 32 bits."""
    value &= _MASK32
    return ops.convert_to_tensor(value - (1 << 32) if value >= 1 << 31 else value, "int32")


def _shift_right(h, bits):
    """Logical right shift of 32-bit words held in int32."""
    return ops.bitwise_and(ops.right_shift(h, bits), _word((1 << (32 - bits)) - 1))


def _mix(h):
    """The 32-bit finaliser of MurmurHash3 (a bijection with full avalanche) on int32 words."""
    h = ops.bitwise_xor(h, _shift_right(h, 16))
    h = ops.multiply(h, _word(0x85EBCA6B))
    h = ops.bitwise_xor(h, _shift_right(h, 13))
    h = ops.multiply(h, _word(0xC2B2AE35))
    return ops.bitwise_xor(h, _shift_right(h, 16))


def seed_key(seed):
    """(R, 1) int32 keys from a checked seed, R = 1 for the batch, R = B one per row: the hash of
    each seed's two 32-bit words, made once, before the decoding loop (`position_keys` takes it)."""
    words = _seed_words(seed)
    return _mix(ops.bitwise_xor(words[:, :1], _mix(words[:, 1:] + _word(0x9E3779B9))))


def _seed_words(seed):
    """(R, 2) int32 words (low, high) of a checked seed."""
    if isinstance(seed, (list, tuple)):
        seed = np.asarray(seed)
    if isinstance(seed, np.ndarray) and seed.size == 1:
        seed = seed.item()  # a Python int: JAX would truncate an int64 array
    if isinstance(seed, numbers.Integral):
        return ops.reshape(ops.stack([_word(int(seed)), _word(int(seed) >> 32)]), (1, 2))
    if isinstance(seed, np.ndarray) and seed.ndim == 2 and seed.shape[1] == 1:
        # NumPy's words (JAX would truncate int64): uint64 wraps negative ints, sign-extended.
        bits = seed[:, 0].astype(np.uint64)
        words = np.stack([bits & _MASK32, bits >> np.uint64(32)], axis=-1)
        return ops.convert_to_tensor(words.astype(np.uint32).view(np.int32))
    if not hasattr(seed, "shape"):
        seed = ops.convert_to_tensor(seed)
    shape = tuple(seed.shape)
    dtype = keras.backend.standardize_dtype(seed.dtype)
    if shape[-1:] == (2,):
        # A cast to int32 keeps the low 32 bits of each word (wraps).
        return ops.reshape(ops.cast(seed, "int32"), (-1, 2))
    seed = ops.reshape(seed, (-1,))
    # Low word: the cast (wraps). High word: a shift of a 64-bit seed, else the sign extension.
    low = ops.cast(seed, "int32")
    if dtype.endswith("64"):
        high = ops.cast(ops.right_shift(seed, ops.convert_to_tensor(32, dtype)), "int32")
    elif dtype.startswith("uint"):
        high = ops.zeros_like(low)
    else:
        high = ops.where(ops.less(low, 0), _word(-1), _word(0))
    return ops.stack([low, high], axis=-1)


def position_keys(key, positions):
    """The noise keys of some positions, made for every position before a decoding loop so that
    a step gathers its own (`gumbel_noise`) instead of hashing it.

    Args:
        key: (R, 1) int32 from `seed_key`.
        positions: (P,) int positions.

    Returns:
        (R, P, 2) int32: two 32-bit words per row and position.
    """
    k2 = _mix(ops.bitwise_xor(key, _mix(ops.cast(positions, "int32") + _word(0x7F4A7C15))))
    k3 = _mix(k2 + _word(0x632BE5AB))
    return ops.stack([k2, k3], axis=-1)


def gumbel_noise(keys, position, shape):
    """(B, V) float32 standard Gumbel noise, a pure function of (seed, position, row, index).

    `keys` (R, L, 2) from `position_keys`, `position` an index into its L; `shape` (B, V),
    static ints or scalar tensors.
    """
    k2, k3 = ops.split(ops.take(keys, position, axis=1), 2, axis=-1)  # (R, 1) each
    # One key for the batch: a counter per (row, token) while B * V < 2**31; else per row.
    counter = ops.arange(shape[1], dtype="int32")
    if keys.shape[0] in (1, None):
        rows = ops.expand_dims(ops.arange(shape[0], dtype="int32"), 1)
        offsets = rows * ops.cast(shape[1], "int32")
        if keys.shape[0] is None:  # traced: the number of keys known when the graph runs
            offsets = ops.where(ops.equal(ops.shape(keys)[0], 1), offsets, 0)
        counter = counter + offsets
    bits = _mix(ops.bitwise_xor(_mix(ops.bitwise_xor(counter, k3)), k2))
    # 23 bits -> (0, 1): (2k + 1) / 2**24 is exact in float32 and < 1.
    uniform = (ops.cast(_shift_right(bits, 9), "float32") + 0.5) * (2.0**-23)
    return -ops.log(-ops.log(uniform))


def _is_tensor(value):
    return hasattr(value, "shape") and hasattr(value, "dtype")
