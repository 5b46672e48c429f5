import keras
import numpy as np
from keras import ops

from keras_attn import checks, keras_internals
from keras_attn.generation import arguments


class Decoder:
    """Base of the decoders: a subclass writes `initial_state` and `__call__` (guide: decoding).

    Args:
        model: a `keras.Model` whose output is the next-token logits (B, T, V).
        token_input: the token input's name (default: the only input, else `decoder_tokens`).

    Raises:
        ValueError: if `token_input` names no input of the model.

    Example:
    >>> import keras
    >>> from keras_attn.generation import CachedDecoder, Decoder
    >>> tokens = keras.Input((None,), dtype="int32", name="tokens")
    >>> logits = keras.layers.Dense(7)(keras.layers.Embedding(7, 4)(tokens))
    >>> decoder = CachedDecoder(keras.Model(tokens, logits))
    >>> isinstance(decoder, Decoder), decoder.token_input
    (True, 'tokens')

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 3.
    """

    #: State entries shared by the beams of a row (not reordered).
    shared_state_keys = ()

    #: False for a state that keeps only the last positions (rolling caches): a position cannot
    #: be written twice, so unequal prompts are fed one position at a time.
    keeps_every_position = True

    def __init__(self, model, token_input=None):
        self.model = model
        self._input_names = _input_names(model)
        self.token_input = _find_token_input(self._input_names, token_input, type(self).__name__)

    def repeat_state(self, state, num_beams):
        """The state of batch B with each row repeated `num_beams` (K) times: batch B * K."""
        return keras.tree.map_structure(lambda x: ops.repeat(x, num_beams, axis=0), state)

    def reorder_state(self, state, indices):
        """The state with the rows `indices` (N,) of every entry but `shared_state_keys`."""
        return {
            key: value
            if key in self.shared_state_keys
            else keras.tree.map_structure(lambda x: ops.take(x, indices, axis=0), value)
            for key, value in state.items()
        }

    def _other_inputs(self, inputs, needed, batch_size=None):
        """`{name: tensor}` of the checked model inputs besides the tokens (`needed` names)."""
        needed = list(needed)
        if inputs is not None and not isinstance(inputs, dict) and len(needed) == 1:
            inputs = {needed[0]: inputs}
        accepted = [name for name in self._input_names if name != self.token_input]
        given = {} if inputs is None else inputs
        if not isinstance(given, dict) or not set(needed) <= set(given) <= set(accepted):
            received = (
                f"inputs with names {sorted(given, key=str)}"
                if isinstance(inputs, dict)
                else f"inputs of type {type(inputs).__name__}"
            )
            raise ValueError(
                f"`inputs` must map the model's inputs besides its tokens `{self.token_input}` "
                f"(which the prompt fills) to tensors: {sorted(needed)} needed, of {accepted} "
                f"accepted (inputs=None when there are none). Received: {received}."
            )
        values = {}
        for name in needed:
            value, dtype = inputs[name], self._input_names[name].dtype
            value = value if hasattr(value, "dtype") else np.asarray(value)
            _check_input_value(name, value, self._input_names[name])
            bound = self._embedding_bound(name)
            if bound is not None and "int" in keras.backend.standardize_dtype(dtype):
                if "int" not in keras.backend.standardize_dtype(value.dtype):
                    value = ops.convert_to_tensor(value, dtype)
                message = f"The model input {name} must hold ids in [0, {bound[0]}), the ids "
                message += f"its layer {bound[1]} takes."
                value = arguments.check_ids(value, 0, bound[0], message)
            values[name] = ops.convert_to_tensor(value, dtype=dtype)
            if batch_size is not None:
                values[name] = arguments.check_batch_size(name, values[name], batch_size)
        return values

    def check_inputs(self, inputs):
        """The model's other inputs, checked as generation does: run it before an XLA program.

        Args:
            inputs: a dict by input name (a tensor where the model has one other input).

        Returns:
            `{name: tensor}`, the checked inputs: use them in place of the originals.

        Raises:
            ValueError: as `initial_state`, and where an embedding refuses its input.

        Example:
        >>> import numpy as np
        >>> from keras_attn.generation import CachedDecoder
        >>> from keras_attn.models import translation_transformer
        >>> model = translation_transformer(50, num_layers=1, hidden_dim=8,
        ...                                 num_heads=2, intermediate_dim=8)
        >>> try:
        ...     CachedDecoder(model).check_inputs(np.array([[5, 60, 2]]))
        ... except ValueError as error:
        ...     print(error)
        The model input encoder_tokens must hold ids in [0, 50), the ids its layer encoder_embedding takes. Received: ids from 2 to 60.
        """
        needed = [name for name in self._input_names if name != self.token_input]
        values = self._other_inputs(inputs, needed)
        for name, value in values.items():
            for _, layer in self._embeddings_reading(name):
                nodes = keras_internals.inbound_nodes(layer)
                if all(len(node.input_tensors) == 1 for node in nodes):
                    layer(value)
        return values

    def _embedding_bound(self, name):
        """`(size, layer name)` of the embedding reading input `name` with fewest ids, or None."""
        bounds = [(size, layer.name) for size, layer in self._embeddings_reading(name)]
        return min(bounds) if bounds else None

    def _embeddings_reading(self, name):
        """`[(size, layer)]`: the layers reading input `name` directly with a known id count."""
        tensor = self._input_names.get(name)
        found = []
        for layer in self.model.layers:
            inputs = [
                t for node in keras_internals.inbound_nodes(layer) for t in node.input_tensors
            ]
            size = getattr(layer, "input_dim", getattr(layer, "vocabulary_size", None))
            if checks.is_int(size) and any(t is tensor for t in inputs):
                found.append((size, layer))
        return found


def _find_token_input(input_names, token_input, owner):
    names = list(input_names)
    found = token_input or (names[0] if len(names) == 1 else "decoder_tokens")
    if found not in input_names:
        raise ValueError(
            f"{owner}: `token_input` must name the model input that holds the tokens to "
            f"generate, one of {names} (default: the only input, else `decoder_tokens`). "
            f"Received: token_input={token_input!r}."
        )
    return found


def _check_input_value(name, value, spec):
    """Refuses a model input of another rank than its `keras.Input`, or not numbers."""
    try:
        dtype = keras.backend.standardize_dtype(value.dtype)
    except ValueError:
        dtype = str(value.dtype)
    if len(value.shape) != len(spec.shape) or not any(k in dtype for k in ("bool", "int", "float")):
        expected = ", ".join(["B"] + ["?" if d is None else str(d) for d in spec.shape[1:]])
        raise ValueError(
            f"The model input {name} must be a tensor of shape ({expected}) and dtype "
            f"{spec.dtype}, as its `keras.Input`. Received: shape {tuple(value.shape)}, dtype {dtype}."
        )


def _input_names(model):
    """Maps each input name to its KerasTensor (dict keys for dict inputs)."""
    structure = model.input
    if isinstance(structure, dict):
        return dict(structure)
    return {t.name: t for t in keras.tree.flatten(structure)}
