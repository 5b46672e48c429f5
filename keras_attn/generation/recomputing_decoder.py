import keras
from keras import ops

from keras_attn.generation.decoder import Decoder
from keras_attn.layers.position_writes import write_positions


class RecomputingDecoder(Decoder):
    """Decodes with any causal model by recomputing the whole prefix each step.

    The reference for `CachedDecoder`, and a fallback for causal models it cannot adapt
    (subclassed ones too): each step runs the full model over `max_length` positions.

    Args:
        model: a `keras.Model` mapping its inputs to next-token logits (B, T, V), causal along T.
        token_input: the token input's name (as `CachedDecoder`; "tokens" for a subclassed model).

    Raises:
        ValueError: if `model` is not a `keras.Model` with (B, T, V) logits (subclassed: at
            the first call), or the token input cannot be found.

    Example:
    >>> import keras
    >>> from keras_attn.generation import CachedDecoder, RecomputingDecoder, greedy_search
    >>> from keras_attn.models import music_transformer
    >>> lm = music_transformer(40, num_layers=1, hidden_dim=16, num_heads=2,
    ...                        intermediate_dim=32, max_relative_position=8)
    >>> primer = keras.ops.array([[1, 7, 9]])
    >>> slow = greedy_search(RecomputingDecoder(lm), primer, max_length=8)
    >>> fast = greedy_search(CachedDecoder(lm), primer, max_length=8)
    >>> bool(keras.ops.all(slow == fast))
    True

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 3.
    """

    shared_state_keys = ("inputs",)

    def __init__(self, model, token_input=None):
        if not isinstance(model, keras.Model):
            raise ValueError(f"RecomputingDecoder needs a `keras.Model`. Received: {model!r}.")
        # A subclassed model has no symbolic inputs (`model.input` raises): called on the tokens.
        self._subclassed = not isinstance(getattr(model, "inputs", None), (list, tuple, dict))
        if self._subclassed:
            self.model, self.vocabulary_size = model, None
            self.token_input = token_input or "tokens"
            self._input_names = {self.token_input: None}
        else:
            super().__init__(model, token_input)
            for output in keras.tree.flatten(model.outputs):
                _check_logits_shape(output.shape)
            self.vocabulary_size = model.outputs[0].shape[-1]

    def initial_state(self, batch_size, max_length, inputs=None):
        """`{"tokens": (B, L) int32 zeros, "inputs": {name: tensor}}` (as `CachedDecoder`'s)."""
        others = [name for name in self._input_names if name != self.token_input]
        values = self._other_inputs(inputs, others, batch_size)
        return {"tokens": ops.zeros((batch_size, max_length), "int32"), "inputs": values}

    def __call__(self, token_ids, cache_index, state, logits_index=None):
        """Writes `token_ids` at `cache_index`, runs the model; returns `(logits, state)`."""
        tokens = write_positions(state["tokens"], ops.cast(token_ids, "int32"), cache_index, axis=1)
        length = ops.shape(token_ids)[1]
        feed = dict(state["inputs"], **{self.token_input: tokens})
        # Keras matches a dict to the model's inputs by name; one input (not a dict) takes a tensor.
        one = self._subclassed or len(feed) == 1 and not isinstance(self.model.input, dict)
        logits = self.model(tokens if one else feed, training=False)
        _check_logits_shape(logits.shape)
        first = cache_index if logits_index is None else cache_index + logits_index
        size = length if logits_index is None else 1
        logits = ops.slice(logits, (0, first, 0), (ops.shape(logits)[0], size, logits.shape[-1]))
        return logits, {"tokens": tokens, "inputs": state["inputs"]}


def _check_logits_shape(shape):
    """Refuses model outputs that are not (B, T, V) next-token logits."""
    if len(shape) != 3 or shape[-1] is None:
        raise ValueError(
            "RecomputingDecoder needs a model whose output is the next-token logits of "
            f"shape (batch, length, vocabulary). Received an output of shape {tuple(shape)}."
        )
