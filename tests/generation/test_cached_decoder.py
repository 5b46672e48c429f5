import keras
import numpy as np
import pytest

from keras_attn.generation import CachedDecoder
from keras_attn.layers import (
    MultiHeadSelfAttention,
    TokenAndPositionEmbedding,
    TransformerDecoder,
    TransformerEncoder,
)
from tests.generation import tiny_models

RNG = np.random.default_rng(11)


def _stepwise_logits(decoder, tokens, prefill, inputs=None):
    """Prefill `prefill` positions in one call, then one position per call."""
    state = decoder.initial_state(len(tokens), tokens.shape[1], inputs)
    logits, state = decoder(tokens[:, :prefill], 0, state)
    outs = [np.asarray(logits)]
    for i in range(prefill, tokens.shape[1]):
        logits, state = decoder(tokens[:, i : i + 1], i, state)
        outs.append(np.asarray(logits))
    return np.concatenate(outs, axis=1)


@pytest.mark.parametrize("kind", tiny_models.KINDS)
def test_decoder_only_cached_logits_equal_full_pass(kind):
    model = tiny_models.language_model(kind, normalize_first=kind != "multi_head")
    tokens = RNG.integers(1, tiny_models.VOCABULARY, (2, 11)).astype("int32")
    full = np.asarray(model(tokens))
    decoder = CachedDecoder(model)
    np.testing.assert_allclose(_stepwise_logits(decoder, tokens, prefill=4), full, atol=1e-4)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_translation_cached_logits_equal_full_pass(normalize_first):
    model = tiny_models.translation_model(normalize_first)
    source = tiny_models.SOURCE
    target = RNG.integers(1, tiny_models.VOCABULARY, (2, 7)).astype("int32")
    full = np.asarray(model({"encoder_tokens": source, "decoder_tokens": target}))
    decoder = CachedDecoder(model)
    assert decoder.token_input == "decoder_tokens"
    got = _stepwise_logits(decoder, target, prefill=1, inputs={"encoder_tokens": source})
    np.testing.assert_allclose(got, full, atol=1e-4)
    # The second source row is padded: its mask (source != 0) reaches the
    # cross-attention, so extra padding changes nothing.
    padded = np.concatenate([source, np.zeros((2, 3), "int32")], axis=1)
    got_padded = _stepwise_logits(decoder, target, prefill=3, inputs={"encoder_tokens": padded})
    np.testing.assert_allclose(got_padded, full, atol=1e-4)


def test_hand_built_model_with_direct_attention_and_ops():
    model = tiny_models.bare_attention_model()
    decoder = CachedDecoder(model)
    tokens = RNG.integers(0, tiny_models.VOCABULARY, (3, 9)).astype("int32")
    np.testing.assert_allclose(
        _stepwise_logits(decoder, tokens, prefill=2), np.asarray(model(tokens)), atol=1e-4
    )


def test_stack_of_different_attention_types_and_cache_shapes():
    model = tiny_models.mixed_model()
    tokens = RNG.integers(1, tiny_models.VOCABULARY, (2, 10)).astype("int32")
    tokens[1, 6] = 0  # a padding id inside: masked as the full model masks it
    np.testing.assert_allclose(
        _stepwise_logits(CachedDecoder(model), tokens, prefill=3),
        np.asarray(model(tokens)),
        atol=1e-4,
    )


def test_block_returning_attention_scores_is_replayed_without_them():
    def build(x):
        y, _ = TransformerDecoder(32, num_heads=2, name="decoder")(x, return_attention_scores=True)
        return y

    model = _model(build)
    tokens = RNG.integers(1, tiny_models.VOCABULARY, (2, 8)).astype("int32")
    np.testing.assert_allclose(
        _stepwise_logits(CachedDecoder(model), tokens, prefill=2),
        np.asarray(model(tokens)),
        atol=1e-4,
    )


def test_logits_index_returns_one_position():
    model = tiny_models.language_model()
    tokens = RNG.integers(1, tiny_models.VOCABULARY, (2, 6)).astype("int32")
    decoder = CachedDecoder(model)
    state = decoder.initial_state(2, 8)
    logits, _ = decoder(tokens, 0, state, logits_index=3)
    assert logits.shape == (2, 1, tiny_models.VOCABULARY)
    np.testing.assert_allclose(np.asarray(logits)[:, 0], np.asarray(model(tokens))[:, 3], atol=1e-5)


def test_beam_state_repeat_and_reorder():
    model = tiny_models.translation_model()
    decoder = CachedDecoder(model)
    state = decoder.initial_state(2, 5, {"encoder_tokens": tiny_models.SOURCE})
    _, state = decoder(np.array([[1, 3], [1, 4]], "int32"), 0, state)
    repeated = decoder.repeat_state(state, 3)
    cache = np.asarray(state["caches"][0])
    np.testing.assert_array_equal(np.asarray(repeated["caches"][0]), np.repeat(cache, 3, axis=0))
    cross, mask = repeated["memory"][0]
    np.testing.assert_array_equal(np.asarray(mask), np.repeat(tiny_models.SOURCE != 0, 3, axis=0))
    assert cross.shape[0] == 6
    reordered = decoder.reorder_state(repeated, np.array([5, 0, 1, 2, 3, 4]))
    np.testing.assert_array_equal(
        np.asarray(reordered["caches"][1])[0], np.asarray(state["caches"][1])[1]
    )


def _model(build):
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = TokenAndPositionEmbedding(tiny_models.VOCABULARY, 16, sequence_length=8, name="embedding")(
        tokens
    )
    x = build(x)
    return keras.Model(tokens, keras.layers.Dense(tiny_models.VOCABULARY, name="logits")(x))


def test_errors_name_the_unexpected_layer():
    with pytest.raises(ValueError, match=r"'encoder_block' \(TransformerEncoder\).*not causal"):
        CachedDecoder(
            _model(lambda x: TransformerEncoder(32, num_heads=2, name="encoder_block")(x))
        )
    with pytest.raises(ValueError, match=r"'conv' \(Conv1D\).*not known to act on each position"):
        CachedDecoder(
            _model(lambda x: keras.layers.Conv1D(16, 3, padding="causal", name="conv")(x))
        )
    with pytest.raises(
        ValueError, match=r"'attention' \(MultiHeadSelfAttention\).*use_causal_mask=False"
    ):
        CachedDecoder(_model(lambda x: MultiHeadSelfAttention(2, 8, name="attention")(x)))
    with pytest.raises(ValueError, match="use_causal_mask=False.*needs causal"):
        CachedDecoder(
            _model(lambda x: TransformerDecoder(32, num_heads=2)(x, use_causal_mask=False))
        )
    with pytest.raises(ValueError, match="single output"):
        tokens = keras.Input((None,), dtype="int32")
        x = keras.layers.Embedding(5, 4)(tokens)
        CachedDecoder(keras.Model(tokens, [x, x]))
    with pytest.raises(ValueError, match="functional"):
        CachedDecoder(keras.Sequential([keras.layers.Dense(3)]))
    with pytest.raises(ValueError, match=r"token_input.*\['encoder_tokens', 'decoder_tokens'\]"):
        CachedDecoder(tiny_models.translation_model(), token_input="target")
    decoder = CachedDecoder(tiny_models.translation_model())
    with pytest.raises(
        ValueError, match=r"\['encoder_tokens'\] needed.*Received: inputs with names \['source'\]"
    ):
        decoder.initial_state(2, 8, {"source": tiny_models.SOURCE})
    with pytest.raises(ValueError, match=r"max_length=20 does not fit layer .*16 positions"):
        CachedDecoder(tiny_models.language_model(max_length=16)).check_max_length(20)
    # The searches ask before padding the prompt to max_length: 10**9 was
    # padded first, and the process was killed for memory.
    from keras_attn.generation import greedy_search

    with pytest.raises(
        ValueError, match=r"max_length=1000000000 does not fit layer .*16 positions"
    ):
        greedy_search(tiny_models.language_model(max_length=16), np.ones((2, 3), "int32"), 10**9)


def test_step_errors():
    decoder = CachedDecoder(tiny_models.language_model())
    state = decoder.initial_state(2, 8)
    tokens = np.ones((2, 1), "int32")
    with pytest.raises(
        ValueError,
        match=r"`token_ids` must be integer token ids \(batch, length\) for the state's batch "
        r"\[2\]\. Received: int32 \(3, 1\)\.",
    ):
        decoder(np.ones((3, 1), "int32"), 0, state)
    with pytest.raises(
        ValueError, match=r"`cache_index` must be an integer scalar.*Received: cache_index=1\.0"
    ):
        decoder(tokens, 1.0, state)
    with pytest.raises(
        ValueError,
        match=r"`token_ids` must be integer token ids \(batch, length\).*Received: float32 \(2, 1\)",
    ):
        decoder(tokens.astype("float32"), 0, state)
    logits, _ = decoder(tokens, 0, state)  # the valid call runs
    assert tuple(logits.shape) == (2, 1, tiny_models.VOCABULARY)


class _ConditionedOffset(keras.layers.Layer):
    """A user's own position-aware layer, unknown to keras_attn: follows the
    engine's protocol (a `start_index` call argument) and reads a second,
    token-independent input (a per-row condition)."""

    def build(self, inputs_shape, condition_shape=None):
        self.table = self.add_weight(shape=(32, inputs_shape[-1]), name="table")

    def call(self, inputs, condition, start_index=0):
        length = keras.ops.shape(inputs)[1]
        positions = keras.ops.arange(length, dtype="int32") + keras.ops.cast(start_index, "int32")
        rows = keras.ops.take(self.table, positions, axis=0)  # (T, D)
        scale = keras.ops.cast(condition, inputs.dtype)[:, None, None]  # (B, 1, 1)
        return inputs + rows[None] * scale


def test_a_custom_position_aware_layer_decodes_with_the_cache():
    tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
    condition = keras.Input((), dtype="float32", name="condition")
    x = keras.layers.Embedding(tiny_models.VOCABULARY, 16, name="embedding")(tokens)
    x = _ConditionedOffset(name="offset")(x, condition)
    x = TransformerDecoder(intermediate_dim=32, num_heads=2, name="decoder_layer_0")(x)
    model = keras.Model(
        {"decoder_tokens": tokens, "condition": condition},
        keras.layers.Dense(tiny_models.VOCABULARY, name="logits")(x),
    )
    ids = RNG.integers(1, tiny_models.VOCABULARY, (2, 9)).astype("int32")
    scale = np.array([0.5, 2.0], "float32")
    full = np.asarray(model({"decoder_tokens": ids, "condition": scale}))
    stepwise = _stepwise_logits(CachedDecoder(model), ids, prefill=3, inputs={"condition": scale})
    np.testing.assert_allclose(stepwise, full, atol=1e-4)
    # The condition reaches the logits: another one changes them.
    other = np.asarray(model({"decoder_tokens": ids, "condition": scale * 0}))
    assert np.abs(other - full).max() > 1e-3


class _CausalRunningMean(keras.layers.Layer):
    """A user's own sequence-mixing layer, unknown to keras_attn: each
    position adds the mean of a projection of itself and every earlier
    position. It follows the engine's cached-layer protocol (`init_cache`,
    `cache` / `cache_index` call arguments, `(outputs, cache)` back) and has
    no padding mask."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.projection = keras.layers.Dense(16, name="projection")

    def build(self, inputs_shape):
        self.projection.build(inputs_shape)

    def init_cache(self, batch_size, max_length):
        return keras.ops.zeros((batch_size, max_length, 16))

    def call(self, inputs, use_causal_mask=True, cache=None, cache_index=None):
        ops = keras.ops
        values = self.projection(inputs)
        start = 0 if cache is None else ops.cast(cache_index, "int32")
        if cache is not None:
            cache = ops.slice_update(cache, (0, start, 0), values)
            values = cache
        queries = ops.arange(ops.shape(inputs)[1], dtype="int32") + start
        keys = ops.arange(ops.shape(values)[1], dtype="int32")
        weights = ops.cast(keys[None, :] <= queries[:, None], inputs.dtype)  # (T, S)
        weights = weights / ops.sum(weights, axis=-1, keepdims=True)
        outputs = inputs + ops.einsum("ts,bsd->btd", weights, values)
        return outputs if cache is None else (outputs, cache)


def test_custom_cached_and_position_layers_decode_without_engine_changes():
    tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
    condition = keras.Input((), dtype="float32", name="condition")
    x = keras.layers.Embedding(tiny_models.VOCABULARY, 16, name="embedding")(tokens)
    x = _ConditionedOffset(name="offset")(x, condition)
    x = _CausalRunningMean(name="running_mean")(x)
    x = TransformerDecoder(intermediate_dim=32, num_heads=2, name="decoder_layer_0")(x)
    x = MultiHeadSelfAttention(2, 8, name="attention")(x, use_causal_mask=True)
    model = keras.Model(
        {"decoder_tokens": tokens, "condition": condition},
        keras.layers.Dense(tiny_models.VOCABULARY, name="logits")(x),
    )
    ids = RNG.integers(1, tiny_models.VOCABULARY, (2, 9)).astype("int32")
    scale = np.array([0.5, 2.0], "float32")
    full = np.asarray(model({"decoder_tokens": ids, "condition": scale}))
    decoder = CachedDecoder(model)
    stepwise = _stepwise_logits(decoder, ids, prefill=3, inputs={"condition": scale})
    np.testing.assert_allclose(stepwise, full, atol=1e-4)
    assert len(decoder.initial_state(2, 9, {"condition": scale})["caches"]) == 3
    # Future tokens change no past output: the running mean is causal.
    changed = ids.copy()
    changed[:, 6:] = 1
    past = np.asarray(model({"decoder_tokens": changed, "condition": scale}))[:, :6]
    np.testing.assert_allclose(past, full[:, :6], atol=1e-5)


def test_a_cached_layer_without_a_cache_argument_is_refused():
    class _NoCacheArgument(keras.layers.Layer):
        def init_cache(self, batch_size, max_length):
            return keras.ops.zeros((batch_size, max_length, 16))

        def call(self, inputs):
            return inputs

    with pytest.raises(ValueError, match=r"'odd'.*init_cache.*does not take a cache.*\['inputs'\]"):
        CachedDecoder(_model(lambda x: _NoCacheArgument(name="odd")(x)))
    with pytest.raises(ValueError, match=r"'attention'.*called with `attention_mask`"):
        mask = np.tril(np.ones((8, 8), bool))[None]
        CachedDecoder(
            _model(
                lambda x: MultiHeadSelfAttention(2, 8, name="attention")(
                    x, use_causal_mask=True, attention_mask=keras.ops.convert_to_tensor(mask)
                )
            )
        )


class _PositionedRunningMean(_CausalRunningMean):
    """A cached layer with its own learned positions: it also takes
    `start_index` and declares `max_positions`."""

    max_positions = 12

    def build(self, inputs_shape):
        super().build(inputs_shape)
        self.table = self.add_weight(shape=(12, inputs_shape[-1]), name="table")

    def call(self, inputs, start_index=0, use_causal_mask=True, cache=None, cache_index=None):
        positions = keras.ops.arange(keras.ops.shape(inputs)[1], dtype="int32") + start_index
        inputs = inputs + 3.0 * keras.ops.take(self.table, positions, axis=0)[None]
        return super().call(inputs, use_causal_mask, cache, cache_index)


def test_a_cached_layer_with_its_own_positions_gets_start_index():
    ids = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(tiny_models.VOCABULARY, 16, name="embedding")(ids)
    x = _PositionedRunningMean(name="positioned")(x)
    model = keras.Model(ids, keras.layers.Dense(tiny_models.VOCABULARY, name="logits")(x))
    tokens = RNG.integers(1, tiny_models.VOCABULARY, (2, 12)).astype("int32")
    decoder = CachedDecoder(model)
    np.testing.assert_allclose(
        _stepwise_logits(decoder, tokens, prefill=3), np.asarray(model(tokens)), atol=1e-4
    )
    with pytest.raises(
        ValueError, match=r"max_length=13 does not fit layer 'positioned'.*12 positions"
    ):
        decoder.check_max_length(13)


def test_cached_layers_that_break_the_protocol_are_named():
    class _ForgetsItsCache(_CausalRunningMean):
        def call(self, inputs, use_causal_mask=True, cache=None, cache_index=None):
            result = super().call(inputs, use_causal_mask, cache, cache_index)
            return result[0] if cache is not None else result

    decoder = CachedDecoder(_model(lambda x: _ForgetsItsCache(name="forgetful")(x)))
    state = decoder.initial_state(1, 4)
    with pytest.raises(
        ValueError, match=r"'forgetful'.*returned .* instead of `\(outputs, new_cache"
    ):
        decoder(np.ones((1, 2), "int32"), 0, state)

    class _TakesKerasMask(_CausalRunningMean):
        def call(self, inputs, mask=None, use_causal_mask=True, cache=None, cache_index=None):
            return super().call(inputs, use_causal_mask, cache, cache_index)

    with pytest.raises(ValueError, match=r"'keras_mask'.*`mask` call argument.*Rename"):
        CachedDecoder(_model(lambda x: _TakesKerasMask(name="keras_mask")(x)))


def test_check_inputs_checks_ids_and_runs_the_embeddings_own_checks():
    # What an exporter runs outside an XLA program (which drops run-time
    # checks): the ids against the embedding, and the embedding's own checks.
    from keras_attn.models import translation_transformer
    from tests.test_case import traced

    model = translation_transformer(
        50,
        num_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=8,
        position="learned",
        max_length=6,
    )
    decoder = CachedDecoder(model)
    good = np.array([[5, 49, 2]], "int32")
    checked = decoder.check_inputs({"encoder_tokens": good})
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(checked["encoder_tokens"]), good)
    with pytest.raises(
        ValueError, match=r"encoder_tokens must hold ids in \[0, 50\).*from 2 to 60\."
    ):
        decoder.check_inputs(np.array([[5, 60, 2]], "int32"))
    with pytest.raises(
        ValueError, match=r"learned position table of 6 rows.*Received: positions 0\.\.6\."
    ):
        decoder.check_inputs(np.ones((1, 7), "int32"))  # longer than the position table
    # Ids int32 cannot hold are refused, not wrapped by the cast (2**32 + 7 -> 7).
    with pytest.raises(
        ValueError, match=r"encoder_tokens must hold ids in \[0, 50\).*from 3 to 4294967303\."
    ):
        decoder.check_inputs(np.array([[2**32 + 7, 3]], "int64"))
    # Traced, the ids are known only when the function runs.
    check = traced(lambda ids: decoder.check_inputs(ids)["encoder_tokens"])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(check(good)), good)
    with pytest.raises(Exception, match=r"encoder_tokens must hold ids in \[0, 50\)"):
        keras.ops.convert_to_numpy(check(np.array([[5, 60, 2]], "int32")))
