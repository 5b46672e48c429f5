import keras
import numpy as np
from keras import ops

from keras_attn import keras_internals
from keras_attn.generation import arguments


class Decoder:
    """Base of the decoders the generation functions drive: the protocol, and
    the state bookkeeping written once.

    `greedy_search`, `sample` and `beam_search` run any object with four
    methods: `initial_state(batch_size, max_length, inputs)`,
    `__call__(token_ids, cache_index, state, logits_index=None)` returning
    `(logits, state)`, `repeat_state(state, num_beams)` and
    `reorder_state(state, indices)`. A subclass writes the first two; this
    base gives it the other two, which only need to know which entries of
    the state dict beams share (`shared_state_keys`: e.g. the encoder memory
    of a translation, computed once per source row), and the reading of the
    model's inputs both decoders need (which one holds the tokens, the others
    as a dict by name). A decoder may also have `check_max_length(max_length)`,
    which the searches call before they pad the prompt to `max_length`
    (`CachedDecoder` refuses lengths its position layers cannot encode).

    Args:
        model: a `keras.Model` whose output is the next-token logits
            (B, T, V).
        token_input: name of the token-id input. Defaults to the only input
            of a one-input model, else the input named `decoder_tokens`.

    Raises:
        ValueError: if `token_input` names no input, or none is given and the
            model has several inputs, none named `decoder_tokens`.

    Example:
    >>> import keras
    >>> from keras_attn.generation import CachedDecoder, Decoder
    >>> tokens = keras.Input((None,), dtype="int32", name="tokens")
    >>> logits = keras.layers.Dense(7)(keras.layers.Embedding(7, 4)(tokens))
    >>> decoder = CachedDecoder(keras.Model(tokens, logits))
    >>> isinstance(decoder, Decoder), decoder.token_input
    (True, 'tokens')

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 3
        (auto-regressive decoding); beam search as in Wu et al. 2016,
        "Google's Neural Machine Translation System", section 7.
    """

    #: State entries shared by the beams of a row (not reordered).
    shared_state_keys = ()

    #: Whether the state holds every position, so that a position can be
    #: written again. The generation functions rewrite the positions after
    #: the shortest prompt of a batch; a decoder whose caches keep only the
    #: last positions (rolling caches) sets this to False, and they then
    #: feed a batch of unequal prompts one position at a time.
    keeps_every_position = True

    def __init__(self, model, token_input=None):
        self.model = model
        self._input_names = _input_names(model)
        self.token_input = _find_token_input(self._input_names, token_input, type(self).__name__)

    def initial_state(self, batch_size, max_length, inputs=None):
        """The state before the first call (see the subclass)."""
        raise NotImplementedError

    def __call__(self, token_ids, cache_index, state, logits_index=None):
        """Runs `token_ids` at `cache_index ...`; returns `(logits, state)`."""
        raise NotImplementedError

    def repeat_state(self, state, num_beams):
        """Repeats every row `num_beams` times (row b becomes rows
        b * num_beams ... b * num_beams + num_beams - 1), shared entries too.

        Args:
            state: a state of batch size B.
            num_beams: K, a positive int.

        Returns:
            The state with batch size B * K.
        """
        return keras.tree.map_structure(lambda x: ops.repeat(x, num_beams, axis=0), state)

    def reorder_state(self, state, indices):
        """Gathers the rows of every entry the beams do not share (beam
        reordering); `shared_state_keys` stay as they are.

        Args:
            state: a state dict of batch size N.
            indices: (N,) int rows to take.

        Returns:
            The reordered state.
        """
        return {
            key: value
            if key in self.shared_state_keys
            else keras.tree.map_structure(lambda x: ops.take(x, indices, axis=0), value)
            for key, value in state.items()
        }

    def _other_inputs(self, inputs, needed, batch_size=None):
        """The model inputs besides the tokens, checked (where generation
        receives them: in the prefill), as tensors by name.

        Args:
            inputs: a dict by input name, or a single tensor when exactly one
                input is needed, or None.
            needed: the names that must be given.
            batch_size: B, the rows decoded (the prompt's), an int or scalar
                tensor; each input must have B rows. None: not checked.

        Returns:
            `{name: tensor}` for each name in `needed`, in the input's dtype.

        Raises:
            ValueError: if `inputs` misses a needed name or holds one that is
                not one of the model's inputs besides the tokens, an input
                has another rank than its `keras.Input` or is not numbers,
                has ids outside the embedding that reads it (an id outside
                fails in the gather on TensorFlow and is clipped on JAX), or
                rows other than `batch_size`.
        """
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
                value = arguments.check_ids(
                    value,
                    0,
                    bound[0],
                    (
                        f"The model input {name} must hold ids in [0, {bound[0]}), the ids its layer "
                        f"{bound[1]} takes."
                    ),
                )
            value = ops.convert_to_tensor(value, dtype=dtype)
            values[name] = arguments.check_batch_size(name, value, batch_size)
        return values

    def check_inputs(self, inputs):
        """The model's inputs besides the tokens, checked as generation
        checks them, for a caller that compiles generation with XLA (which
        drops run-time checks: an id outside the vocabulary would be clamped
        silently) to run first, in the plain graph around the XLA program.

        The ids are checked against the embeddings that read them (see
        `_other_inputs`), and those embeddings are called once, so that
        their own run-time checks run too (a learned position table refuses
        a source longer than it; only embeddings that take that input alone
        are called, and their output is discarded: `tf.function` runs
        a stateful check whether or not its value is used; under `jax.jit`
        shapes are static, so such checks fail while tracing).

        Args:
            inputs: a dict by input name (a single tensor where the model has
                one input besides the tokens): every input besides the tokens.

        Returns:
            `{name: tensor}`, the checked inputs: use them in place of the
            originals.

        Raises:
            ValueError: as `_other_inputs`, and where an embedding refuses
                its input (values known only at run time fail when the graph
                runs, TF's InvalidArgumentError with the same message).

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
        """`(size, layer name)` of the embedding that reads the model input
        `name` and takes the fewest ids, or None when no such layer reads it
        directly (see `_embeddings_reading`)."""
        bounds = [(size, layer.name) for size, layer in self._embeddings_reading(name)]
        return min(bounds) if bounds else None

    def _embeddings_reading(self, name):
        """`[(size, layer)]`: the layers that read the model input `name`
        directly and take a known number of ids (a Keras `Embedding`'s
        `input_dim`, a keras_attn embedding's `vocabulary_size`)."""
        tensor = self._input_names.get(name)
        found = []
        for layer in self.model.layers:
            reads_input = any(
                any(t is tensor for t in node.input_tensors)
                for node in keras_internals.inbound_nodes(layer)
            )
            size = getattr(layer, "input_dim", getattr(layer, "vocabulary_size", None))
            if reads_input and isinstance(size, int) and not isinstance(size, bool):
                found.append((size, layer))
        return found


def _find_token_input(input_names, token_input, owner):
    names = list(input_names)
    found = token_input
    if found is None:
        found = names[0] if len(names) == 1 else "decoder_tokens"
    if found not in input_names:
        raise ValueError(
            f"{owner}: `token_input` must name the model input that holds the tokens to "
            f"generate, one of {names} (default: the only input, else `decoder_tokens`). "
            f"Received: token_input={token_input!r}."
        )
    return found


def _check_input_value(name, value, spec):
    """Refuses a model input of another rank than its `keras.Input` (a 1-D
    source was reported as a batch mismatch) or not numbers ("Invalid dtype")."""
    try:
        dtype = keras.backend.standardize_dtype(value.dtype)
    except ValueError:
        dtype = str(value.dtype)
    if len(value.shape) != len(spec.shape) or not any(k in dtype for k in ("bool", "int", "float")):
        expected = ", ".join(["B"] + ["?" if d is None else str(d) for d in spec.shape[1:]])
        raise ValueError(
            f"The model input {name} must be a tensor of shape ({expected}) and dtype "
            f"{spec.dtype}, as its `keras.Input`. Received: shape {tuple(value.shape)}, "
            f"dtype {dtype}."
        )


def _input_names(model):
    """Maps each input name to its KerasTensor (dict keys for dict inputs)."""
    structure = model.input
    if isinstance(structure, dict):
        return dict(structure)
    return {t.name: t for t in keras.tree.flatten(structure)}
