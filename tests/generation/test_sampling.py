import re

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.generation import (
    RecomputingDecoder,
    arguments,
    greedy_search,
    sample,
    top_k_filter,
    top_p_filter,
)
from tests.generation import tiny_models

NEG_INF = -np.inf


def _kept(logits):
    return np.isfinite(np.asarray(logits))


def test_top_p_keeps_the_smallest_set_reaching_p():
    # Probabilities in shuffled order: 0.15, 0.5, 0.05, 0.3.
    probs = np.array([[0.15, 0.5, 0.05, 0.3]], "float32")
    logits = np.log(probs)
    cases = {
        0.3: [0, 1, 0, 0],  # the top token alone already holds 0.5
        0.5: [0, 1, 0, 0],  # 0.5 reaches 0.5
        0.51: [0, 1, 0, 1],  # 0.5 + 0.3
        0.75: [0, 1, 0, 1],
        0.81: [1, 1, 0, 1],  # 0.5 + 0.3 + 0.15 = 0.95
        0.96: [1, 1, 1, 1],
        1.0: [1, 1, 1, 1],
    }
    for p, want in cases.items():
        filtered = np.asarray(top_p_filter(logits, p))
        np.testing.assert_array_equal(_kept(filtered)[0], np.array(want, bool), err_msg=f"p={p}")
        np.testing.assert_allclose(filtered[_kept(filtered)], logits[_kept(filtered)])
        assert (filtered[~_kept(filtered)] == NEG_INF).all()
    # Ties are ranked in index order: a uniform row keeps the first ceil(4p).
    uniform = np.zeros((1, 4), "float32")
    np.testing.assert_array_equal(_kept(top_p_filter(uniform, 0.5))[0], [1, 1, 0, 0])
    np.testing.assert_array_equal(_kept(top_p_filter(uniform, 0.6))[0], [1, 1, 1, 0])
    # Rows are filtered independently, and p may be a tensor.
    both = np.concatenate([logits, uniform])
    kept = _kept(top_p_filter(both, ops.convert_to_tensor(0.75)))
    np.testing.assert_array_equal(kept, [[0, 1, 0, 1], [1, 1, 1, 0]])


def test_top_k_keeps_the_k_largest():
    logits = np.array([[1.0, 3.0, 2.0, 0.0], [0.5, -1.0, 4.0, 2.5]], "float32")
    np.testing.assert_array_equal(_kept(top_k_filter(logits, 2)), [[0, 1, 1, 0], [0, 0, 1, 1]])
    np.testing.assert_array_equal(_kept(top_k_filter(logits, 1)), [[0, 1, 0, 0], [0, 0, 1, 0]])
    np.testing.assert_array_equal(np.asarray(top_k_filter(logits, 4)), logits)
    np.testing.assert_array_equal(np.asarray(top_k_filter(logits, 3))[0, :3], [1.0, 3.0, 2.0])


class _FixedLogits:
    """A decoder (the engine's protocol) whose next-token logits never
    change: sampling from it must reproduce softmax(logits / T)."""

    def __init__(self, logits):
        self.logits = np.asarray(logits, "float32")

    def initial_state(self, batch_size, max_length, inputs=None):
        return {"rows": ops.zeros((batch_size,), "int32")}

    def __call__(self, token_ids, cache_index, state, logits_index=None):
        shape = (
            ops.shape(token_ids)[0],
            1 if logits_index is not None else ops.shape(token_ids)[1],
        )
        return ops.broadcast_to(self.logits, shape + (len(self.logits),)), state

    def repeat_state(self, state, num_beams):
        return state

    def reorder_state(self, state, indices):
        return state


# Chi-square critical values at significance 0.001.
_CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52}


@pytest.mark.parametrize(
    "temperature, top_k, top_p, support",
    [
        (0.7, None, None, [0, 1, 2, 3, 4, 5]),
        (1.0, 4, None, [0, 1, 2, 3]),
        (1.0, None, 0.8, [0, 1, 2]),  # masses 0.57, 0.21, 0.13 -> 0.91
        (1.5, 5, 0.9, [0, 1, 2, 3]),
    ],
)
def test_sampling_frequencies_match_the_filtered_softmax(temperature, top_k, top_p, support):
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -3.0], "float32")
    rows = 6000
    decoder = _FixedLogits(logits)
    out = np.asarray(
        sample(
            decoder,
            np.ones((rows, 1), "int32"),
            max_length=2,
            seed=17,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
        )
    )
    counts = np.bincount(out[:, 1], minlength=len(logits))
    assert counts[[i for i in range(len(logits)) if i not in support]].sum() == 0
    scaled = np.exp((logits[support] - logits.max()) / temperature)
    expected = rows * scaled / scaled.sum()
    chi2 = ((counts[support] - expected) ** 2 / expected).sum()
    assert chi2 < _CHI2_999[len(support) - 1], (counts, expected, chi2)


def test_top_k_one_is_greedy_and_seeds_reproduce():
    model = tiny_models.language_model(num_layers=1)
    prompt = np.array([[3, 4, 5], [7, 1, 9]], "int32")
    greedy = np.asarray(greedy_search(model, prompt, 9))
    np.testing.assert_array_equal(np.asarray(sample(model, prompt, 9, seed=1, top_k=1)), greedy)
    first = np.asarray(sample(model, prompt, 9, seed=3, temperature=2.0))
    again = np.asarray(
        sample(model, prompt, 9, seed=ops.convert_to_tensor([3, 0], "int32"), temperature=2.0)
    )
    other = np.asarray(sample(model, prompt, 9, seed=4, temperature=2.0))
    np.testing.assert_array_equal(first, again)
    assert (first != other).any()


@pytest.mark.parametrize("temperature", [1e-38, 1e-45, ops.convert_to_tensor(1e-38)])
def test_a_tiny_temperature_samples_the_most_likely_token(temperature):
    # logits / 1e-38 overflowed float32: every positive logit became +inf,
    # and the first +inf won, not the largest logit.
    logits = np.array([0.5, 2.0, -1.0, 1.0], "float32")
    out = np.asarray(
        sample(
            _FixedLogits(logits),
            np.ones((64, 1), "int32"),
            max_length=3,
            seed=5,
            temperature=temperature,
        )
    )
    assert (out[:, 1:] == 1).all()
    # Tied maxima share the draws, as any temperature shares them.
    out = np.asarray(
        sample(
            _FixedLogits([3.0, 0.0, 3.0]),
            np.ones((2000, 1), "int32"),
            max_length=2,
            seed=5,
            temperature=temperature,
        )
    )
    counts = np.bincount(out[:, 1], minlength=3)
    assert counts[1] == 0 and 850 < counts[0] < 1150, counts


@pytest.mark.parametrize("kind", tiny_models.KINDS)
def test_seeded_sampling_cached_equals_recomputing(kind):
    model = tiny_models.language_model(kind, num_layers=1)
    prompt = np.array([[3, 4, 0], [7, 1, 9]], "int32")
    kwargs = dict(max_length=8, seed=11, temperature=1.3, top_p=0.9, end_token_id=5)
    cached = np.asarray(sample(model, prompt, **kwargs))
    reference = np.asarray(sample(RecomputingDecoder(model), prompt, **kwargs))
    np.testing.assert_array_equal(cached, reference)


def test_seeded_sampling_translation_cached_equals_recomputing():
    model = tiny_models.translation_model()
    inputs = {"encoder_tokens": tiny_models.SOURCE}
    kwargs = dict(max_length=7, seed=5, top_k=6, inputs=inputs)
    cached = np.asarray(sample(model, np.ones((2, 1), "int32"), **kwargs))
    reference = np.asarray(sample(RecomputingDecoder(model), np.ones((2, 1), "int32"), **kwargs))
    np.testing.assert_array_equal(cached, reference)


def test_errors():
    model = tiny_models.language_model(num_layers=1)
    prompt = np.array([[1, 2]], "int32")
    with pytest.raises(ValueError, match="temperature` must be a finite number > 0"):
        sample(model, prompt, 5, seed=0, temperature=0.0)
    with pytest.raises(ValueError, match="top_k` must be a positive int"):
        sample(model, prompt, 5, seed=0, top_k=0)
    with pytest.raises(ValueError, match=r"top_p` must be in \(0, 1\]"):
        sample(model, prompt, 5, seed=0, top_p=1.5)
    # A float used to be truncated (1.5 drew the tokens of 1), a string to
    # fail in the backend, a seed above 64 bits to draw the tokens of its low
    # 64 bits (2**70 those of 0).
    for seed, received in (
        (1.5, "seed=1.5 (dtype float"),
        ("a", "seed='a' (str)"),
        (True, "seed=True (dtype bool"),
        (ops.convert_to_tensor(1.0), "(dtype float32, shape ())"),
        (ops.convert_to_tensor([1, 2, 3]), "shape (3,))"),
        (2**64, f"seed={2**64} (int)"),
        (-(2**63) - 1, f"seed={-(2**63) - 1} (int)"),
        (None, "seed=None (NoneType)"),
        (np.float32(2.0), "(dtype float32, shape ())"),
        ([1.0, 2.0], "(dtype float64, shape (2,))"),
        (np.zeros((1, 3), "int32"), "(dtype int32, shape (1, 3))"),
    ):
        with pytest.raises(
            ValueError,
            match=r"`seed` must be an int that fits 64 bits \(-2\*\*63 to 2\*\*64 - 1\), or an "
            rf"int tensor of shape \(\) or \(2,\).*\(B, 1\) or \(B, 2\).*Received: .*{re.escape(received)}",
        ):
            sample(model, prompt, 5, seed=seed)
    for seed in (-(2**63), 2**64 - 1, np.uint64(2**64 - 1), np.int64(3), [3, 0], np.array(5)):
        assert sample(model, prompt, 5, seed=seed).shape == (1, 5)


def test_a_seed_draws_the_same_tokens_whatever_holds_it():
    # A negative Python int used to give the key words (-1, -1) and the same
    # value as an int32 tensor (-1, 0): other tokens.
    model = tiny_models.language_model(num_layers=1)
    prompt = np.array([[3, 4, 5], [7, 1, 9]], "int32")

    def draw(seed):
        return np.asarray(sample(model, prompt, 12, seed=seed, temperature=3.0))

    for value in (-1, -123457, 5, 2**31 - 1, -(2**31)):
        want = draw(value)
        for seed in (
            np.int64(value),
            np.int32(value),
            np.array(value),
            ops.convert_to_tensor(value, "int32"),
            ops.convert_to_tensor([value], "int32"),
        ):
            np.testing.assert_array_equal(draw(seed), want)
    assert (draw(-1) != draw(0)).any() and (
        draw(-1) != draw(ops.convert_to_tensor([-1, 0], "int32"))
    ).any()
    # Beyond 32 bits: the next 32 bits are the second word.
    np.testing.assert_array_equal(draw(2**32 + 5), draw(ops.convert_to_tensor([5, 1], "int32")))
    np.testing.assert_array_equal(draw(np.array(-(2**40) - 3)), draw(-(2**40) - 3))
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        traced = tf.function(lambda s: sample(model, prompt, 12, seed=s, temperature=3.0))
        for value in (-1, 2**32 + 5, -(2**40) - 3):
            np.testing.assert_array_equal(
                np.asarray(traced(tf.constant(value, tf.int64))), draw(value)
            )
        np.testing.assert_array_equal(np.asarray(traced(tf.constant(-1, tf.int32))), draw(-1))
        np.testing.assert_array_equal(draw(tf.constant(-7, tf.int64)), draw(-7))
    if keras.backend.backend() == "jax":
        import jax

        traced = jax.jit(lambda s: sample(model, prompt, 12, seed=s, temperature=3.0))
        np.testing.assert_array_equal(np.asarray(traced(np.int32(-1))), draw(-1))


def test_a_row_with_its_own_seed_draws_what_it_draws_alone():
    # Issue 46: with one seed per row, a row's tokens depend on its own
    # prompt and seed, not on its place in the batch nor on the other rows.
    model = tiny_models.language_model(num_layers=1)
    prompts = np.array([[3, 4, 5], [7, 1, 9], [2, 8, 0]], "int32")
    seeds = np.array([[11], [-(2**40) - 3], [2**63 - 1]], "int64")

    def draw(prompt, seed):
        return np.asarray(sample(model, prompt, 12, seed=seed, temperature=3.0))

    batch = draw(prompts, seeds)
    for row in range(3):  # alone: the row's seed as a scalar, or as (1, 1)
        alone = draw(prompts[row : row + 1], int(seeds[row, 0]))
        np.testing.assert_array_equal(batch[row], alone[0])
        np.testing.assert_array_equal(draw(prompts[row : row + 1], seeds[row : row + 1]), alone)
    # Row 1's request in another place, with other neighbours.
    moved = draw(prompts[[2, 2, 1]], seeds[[0, 2, 1]])
    np.testing.assert_array_equal(moved[2], batch[1])
    # The same seeds as words (B, 2), as int32 or int64 tensors; a (B, 1) int32 seed
    # is sign-extended as a scalar one.
    words = np.array(
        [[11, 0], [(-(2**40) - 3) & 0xFFFFFFFF, (-(2**40) - 3) >> 32], [-1, 2**31 - 1]]
    )
    np.testing.assert_array_equal(draw(prompts, ops.convert_to_tensor(words, "int32")), batch)
    small = np.array([[-5], [0], [7]], "int32")
    np.testing.assert_array_equal(
        draw(prompts, ops.convert_to_tensor(small)), draw(prompts, small.astype("int64"))
    )
    np.testing.assert_array_equal(
        draw(prompts[:1], ops.convert_to_tensor(small[:1])), draw(prompts[:1], -5)
    )
    # A scalar seed draws as before (rows differ); every row with the scalar's
    # seed draws row 0's noise.
    same = draw(prompts[[0, 0]], 11)
    assert (same[0] != same[1]).any()
    np.testing.assert_array_equal(draw(prompts[[0, 0]], np.array([[11], [11]])), same[[0, 0]])
    with pytest.raises(
        ValueError,
        match=r"one seed per row, an int tensor of shape \(B, 1\) or "
        r"\(B, 2\) for a prompt of B rows\. Received: a seed of "
        r"shape \(R, 1\) or \(R, 2\) with R = 2, for a prompt of 3 rows",
    ):
        draw(prompts, seeds[:2])
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        traced = tf.function(
            lambda p, s: sample(model, p, 12, seed=s, temperature=3.0),
            input_signature=[
                tf.TensorSpec((None, 3), tf.int32),
                tf.TensorSpec((None, 1), tf.int64),
            ],
        )
        np.testing.assert_array_equal(np.asarray(traced(prompts, seeds)), batch)
        np.testing.assert_array_equal(np.asarray(traced(prompts, seeds[:1])), draw(prompts, 11))
        with pytest.raises(
            tf.errors.InvalidArgumentError,
            match=r"with R = \] \[2\] \[, for a "
            r"prompt of \] \[3\] \[ rows",
        ):
            traced(prompts, seeds[:2])
    if keras.backend.backend() == "jax":
        import jax

        traced = jax.jit(lambda p, s: sample(model, p, 12, seed=s, temperature=3.0))
        np.testing.assert_array_equal(np.asarray(traced(prompts, words.astype("int32"))), batch)


@pytest.mark.requires_tensorflow
def test_top_k_filter_with_a_tensor_k_equals_the_static_one_and_zero_keeps_all():
    import tensorflow as tf

    from keras_attn.generation.sampling import top_k_filter

    logits = np.random.RandomState(0).randn(3, 7).astype("float32")
    compiled = tf.function(top_k_filter, jit_compile=True)
    for k in (1, 2, 5, 7):
        want = np.asarray(top_k_filter(logits, k))
        assert np.isneginf(want).sum() == 3 * (7 - k)
        np.testing.assert_array_equal(np.asarray(top_k_filter(logits, tf.constant(k))), want)
        np.testing.assert_array_equal(np.asarray(compiled(logits, tf.constant(k))), want)
    np.testing.assert_array_equal(np.asarray(top_k_filter(logits, tf.constant(0))), logits)
    with pytest.raises(ValueError, match="integer scalar"):
        top_k_filter(logits, tf.constant([2, 3]))


# Each bad control as a Python value and as a tensor, with the start of the
# message both checks give.
_TEMPERATURE = re.escape(arguments.TEMPERATURE_REQUIREMENT)
_TOP_P = re.escape(arguments.TOP_P_REQUIREMENT)
_TENSOR_TOP_K = re.escape(arguments.TENSOR_TOP_K_REQUIREMENT)
_BAD_CONTROLS = [
    ("temperature", 0.0, _TEMPERATURE),
    ("temperature", -1.0, _TEMPERATURE),
    ("temperature", float("inf"), _TEMPERATURE),
    ("temperature", float("nan"), _TEMPERATURE),
    ("top_p", 0.0, _TOP_P),
    ("top_p", 2.0, _TOP_P),
    ("top_k", -3, _TENSOR_TOP_K),
]


@pytest.mark.requires_tensorflow
@pytest.mark.parametrize("name, value, message", _BAD_CONTROLS)
def test_tensor_controls_are_checked_eagerly_and_in_the_graph(name, value, message):
    import tensorflow as tf

    model = tiny_models.language_model(num_layers=1)
    prompt = np.array([[1, 2]], "int32")
    dtype = tf.int32 if name == "top_k" else tf.float32
    # Eager tensors: converted and checked at once (they used to pass and
    # return garbage such as [1, 5, 6, 0, 0, ...]).
    with pytest.raises(ValueError, match=message + " Received: " + name + "="):
        sample(model, prompt, 5, seed=0, **{name: tf.constant(value, dtype)})
    if name != "top_k":  # a Python top_k has its own rule (positive), below
        with pytest.raises(ValueError, match=message):
            sample(model, prompt, 5, seed=0, **{name: value})
    # Traced (a graph input): the same message, from an in-graph assertion.
    traced = tf.function(lambda v: sample(model, prompt, 5, seed=0, **{name: v}))
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        traced(tf.constant(value, dtype))


def test_python_controls_out_of_range_and_wrong_tensors_are_refused():
    model = tiny_models.language_model(num_layers=1)
    prompt = np.array([[1, 2]], "int32")
    for top_k in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match=re.escape(arguments.TOP_K_REQUIREMENT)):
            sample(model, prompt, 5, seed=0, top_k=top_k)
    with pytest.raises(ValueError, match="A tensor `temperature` must be a number scalar"):
        sample(model, prompt, 5, seed=0, temperature=ops.convert_to_tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="A tensor `top_k` must be an integer scalar"):
        sample(model, prompt, 5, seed=0, top_k=ops.convert_to_tensor(2.0))
    with pytest.raises(ValueError, match=_TEMPERATURE):
        sample(model, prompt, 5, seed=0, temperature=True)


@pytest.mark.requires_tensorflow
def test_valid_tensor_controls_sample_as_their_python_values():
    import tensorflow as tf

    model = tiny_models.language_model(num_layers=1)
    prompt = np.array([[3, 4, 5], [7, 1, 9]], "int32")
    python = np.asarray(sample(model, prompt, 10, seed=8, temperature=1.7, top_k=5, top_p=0.9))
    tensors = dict(temperature=tf.constant(1.7), top_k=tf.constant(5), top_p=tf.constant(0.9))
    eager = np.asarray(sample(model, prompt, 10, seed=8, **tensors))
    traced = tf.function(
        lambda t, k, p: sample(model, prompt, 10, seed=8, temperature=t, top_k=k, top_p=p)
    )
    np.testing.assert_array_equal(eager, python)
    np.testing.assert_array_equal(np.asarray(traced(*tensors.values())), python)
    # A tensor top_k of 0 is no filter, the same as None.
    no_filter = np.asarray(sample(model, prompt, 10, seed=8, temperature=1.7))
    np.testing.assert_array_equal(
        np.asarray(sample(model, prompt, 10, seed=8, temperature=1.7, top_k=tf.constant(0))),
        no_filter,
    )


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="the JAX in-graph check")
def test_traced_controls_are_checked_under_jax_jit():
    import jax

    model = tiny_models.language_model(num_layers=1)
    prompt = np.array([[1, 2]], "int32")
    generate = jax.jit(lambda t: sample(model, prompt, 5, seed=0, temperature=t))
    with pytest.raises(Exception, match=_TEMPERATURE) as error:
        generate(jax.numpy.array(0.0))
    assert "ValueError" in str(error.value)
    np.testing.assert_array_equal(
        np.asarray(generate(jax.numpy.array(1.3))),
        np.asarray(sample(model, prompt, 5, seed=0, temperature=1.3)),
    )


def _fmix32(h):
    """MurmurHash3's 32-bit finaliser on uint32 NumPy words (the reference)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _reference_gumbel_noise(seed, position, shape):
    """The noise of `gumbel_noise` from the uint32 hash it documents, in NumPy."""
    low, high = np.uint32(seed & 0xFFFFFFFF), np.uint32((seed >> 32) & 0xFFFFFFFF)
    with np.errstate(over="ignore"):
        k1 = _fmix32(low ^ _fmix32(high + np.uint32(0x9E3779B9)))
        k2 = _fmix32(k1 ^ _fmix32(np.uint32(position) + np.uint32(0x7F4A7C15)))
        k3 = _fmix32(k2 + np.uint32(0x632BE5AB))
        counter = np.arange(shape[0] * shape[1], dtype=np.uint32).reshape(shape)
        bits = _fmix32(_fmix32(counter ^ k3) ^ k2)
    uniform = ((bits >> np.uint32(9)).astype(np.float64) + 0.5) * 2.0**-23
    return -np.log(-np.log(uniform))


@pytest.mark.parametrize("seed", [0, 7, -1, 2**40 + 5])
def test_the_noise_is_the_documented_uint32_hash_on_every_backend(seed):
    # The same bits on TensorFlow, JAX and torch: each backend's int32
    # arithmetic against one NumPy uint32 reference.
    from keras_attn.generation.sampling import gumbel_noise, position_keys, seed_key

    def noise(seed, position, shape):
        # The keys of positions 0, 1 and `position`: the noise reads its own column.
        keys = position_keys(seed_key(seed), np.array([0, 1, position], "int32"))
        return keras.ops.convert_to_numpy(gumbel_noise(keys, 2, shape))

    for position in (0, 5, 2**20):
        got = noise(seed, position, (3, 7))
        # A changed bit moves a value by far more than float32 logs differ.
        np.testing.assert_allclose(
            got, _reference_gumbel_noise(seed, position, (3, 7)), rtol=1e-5, atol=1e-6
        )
        # One seed per row: each row draws the counters of a batch of one.
        rows = noise(np.array([[seed], [seed]]), position, (2, 7))
        np.testing.assert_allclose(
            rows, _reference_gumbel_noise(seed, position, (1, 7))[[0, 0]], rtol=1e-5, atol=1e-6
        )


@pytest.mark.requires_tensorflow
def test_tensor_controls_that_keep_every_token_leave_the_logits_as_python_values_do():
    # Run-time top_p 1 and top_k 0 or >= V: the filters are skipped in a conditional (as the
    # Python values skip them), so no tail token is dropped by the cumulative sum's rounding.
    import tensorflow as tf

    from keras_attn.generation.sampling import top_k_filter, top_p_filter

    logits = np.random.RandomState(1).randn(2, 9).astype("float32") * 8.0
    compiled_p = tf.function(top_p_filter, jit_compile=True)
    np.testing.assert_array_equal(np.asarray(top_p_filter(logits, tf.constant(1.0))), logits)
    np.testing.assert_array_equal(np.asarray(compiled_p(logits, tf.constant(1.0))), logits)
    for k in (0, 9, 12):
        np.testing.assert_array_equal(np.asarray(top_k_filter(logits, tf.constant(k))), logits)
    kept = np.isfinite(np.asarray(top_p_filter(logits, tf.constant(0.5))))
    np.testing.assert_array_equal(kept, np.isfinite(np.asarray(top_p_filter(logits, 0.5))))
    assert 0 < kept.sum() < kept.size
