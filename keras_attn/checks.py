"""The one home of argument checks: the layers', the model builders', the
generation functions' and the exporters' (each raises a ValueError that names the
argument, what was received and what is expected, and how to fix it), and
the in-graph check for values only known when a graph runs.

It imports nothing from keras_attn, so every layer of the library (layers,
models, generation, export) can use it.
"""

import contextlib
import math
import numbers
import operator
import threading

import keras
import numpy as np


def static_int(value):
    """Returns `value` as a Python int when it is known now, else `None`.

    Python ints, NumPy scalars and eager tensors are known; symbolic tensors
    (inside `tf.function`, a Keras functional graph or a JAX trace) are not.

    Args:
        value: a scalar: Python/NumPy integer or a backend tensor.

    Returns:
        `int` or `None`.
    """
    if value is None:
        return None
    try:
        # `operator.index`, not `int`: inside a `tf.function`, AutoGraph
        # rewrites `int(tensor)` into a cast that returns a symbolic tensor.
        return operator.index(value)
    except (TypeError, ValueError, AttributeError):
        return None
    except Exception:  # symbolic tensors of some backends raise their own
        return None


def check_positive_int(owner, name, value):
    """Raises a ValueError unless `value` is a positive integer.

    Args:
        owner: the layer (or any object) whose argument is checked; its class
            name starts the message.
        name: the argument's name.
        value: the value received.

    Raises:
        ValueError: if `value` is not a positive Python int (bools refused,
            and NumPy integers too: Keras layers such as `Dense` refuse them
            later with a message about their own arguments, and a config
            must hold plain ints; the message says to pass `int(value)`).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"{type(owner).__name__}: `{name}` must be a positive integer. "
            f"Received: {name}={value!r}.{_python_int_hint(name, value)}"
        )


def _python_int_hint(name, value):
    """What to do about a positive NumPy (or other non-Python) integer; ""
    otherwise (`int()` would not make a value <= 0 valid)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, int)) and value > 0:
        return (
            f" It is a {type(value).__module__}.{type(value).__name__}: pass a "
            f"Python int, e.g. `{name}=int({name})`."
        )
    return ""


def check_positive_number_or_none(owner, name, value, meaning):
    """Raises a ValueError unless `value` is None or a real number > 0.

    Args:
        owner: the layer whose argument is checked (its class name starts
            the message).
        name: the argument's name.
        value: the value received.
        meaning: what the number is, and what None means, for the message
            (e.g. "the Laplace scale in intensity levels; None = zeros").

    Raises:
        ValueError: if `value` is not None and not a number > 0 (bools
            refused).
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(
            f"{type(owner).__name__}: `{name}` must be a number > 0 or None ({meaning}). "
            f"Received: {name}={value!r}."
        )


def check_chunk_size(owner, value):
    """Raises a ValueError unless `value` is an int >= 1, None or "auto" (the
    `chunk_size` of the global attention layers).

    Args:
        owner: the layer whose argument is checked (its class name starts
            the message).
        value: the value received.

    Raises:
        ValueError: for anything else (bools, other strings and NumPy
            integers refused, as `check_positive_int` does).
    """
    if value is None or (isinstance(value, str) and value == "auto"):
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{type(owner).__name__}: `chunk_size` must be an int >= 1, None or \"auto\". "
            f"Received: chunk_size={value!r}.{_python_int_hint('chunk_size', value)}"
        )


def check_index(value, name):
    """Raises a ValueError unless `value` is an integer scalar.

    Positions (`cache_index`, `start_index`) are Python ints, NumPy integer
    scalars or rank-0 integer tensors (eager or traced). A float would be
    truncated silently and an array would fail deep inside a slice.

    Args:
        value: the value received.
        name: the argument's name, for the message.

    Raises:
        ValueError: if `value` is a bool, a float, or not of rank 0.
    """
    if isinstance(value, bool):
        ok = False
    elif isinstance(value, numbers.Integral):
        ok = True
    elif hasattr(value, "dtype") and hasattr(value, "shape"):
        dtype = keras.backend.standardize_dtype(value.dtype)
        ok = "int" in dtype and len(value.shape) == 0
    else:
        ok = False
    if not ok:
        described = (
            f"{type(value).__name__} of dtype "
            f"{keras.backend.standardize_dtype(value.dtype)} and shape "
            f"{tuple(value.shape)}"
            if hasattr(value, "dtype") and hasattr(value, "shape")
            else type(value).__name__
        )
        raise ValueError(
            f"`{name}` must be an integer scalar (a Python int or a rank-0 "
            f"int32 tensor): an absolute position. Received: {name}={value!r} "
            f"({described})."
        )


def check_start_index(start_index):
    """Checks a position layer's `start_index`, the absolute position of
    `inputs[:, 0]`: an integer scalar (see `check_index`), non-negative when
    known now.

    Args:
        start_index: the value received.

    Returns:
        The index as a Python int when known now, else None (traced).

    Raises:
        ValueError: if `start_index` is not an integer scalar, or a known one
            is negative.
    """
    check_index(start_index, "start_index")
    known = static_int(start_index)
    if known is not None and known < 0:
        raise ValueError(
            "`start_index` is the absolute position of inputs[:, 0] and "
            f"must be non-negative. Received: start_index={known}."
        )
    return known


def check_positions(requirement, start_index, length, limit, value):
    """Refuses positions `start_index .. start_index + T - 1` outside
    `[0, limit)`: now when both are known, else when the graph runs.

    For a position layer with a fixed number of positions (a learned table,
    an image's pixels). Inside `checked_by_caller` (a generation loop's
    steps) and under XLA no run-time check runs.

    Args:
        requirement: the message's first sentences (what fits, how to fix);
            the message is `"{requirement} Received: positions a..b."`.
        start_index: int or int32 scalar (checked with `check_index`).
        length: T, the sequence length: an int, or a scalar tensor with
            the static length unknown.
        limit: the number of positions (int).
        value: the tensor to return.

    Returns:
        `value`, depending on the run-time check where there is one.

    Raises:
        ValueError: if the positions are known now and outside the range.
            Known only at run time, the graph fails with the same message
            (see `check_in_graph`).
    """
    known_start, known_length = static_int(start_index), static_int(length)
    if known_start is not None and known_length is not None:
        if known_start < 0 or known_start + known_length > limit:
            raise ValueError(
                f"{requirement} Received: positions {known_start}..{known_start + known_length - 1}."
            )
        return value
    start = keras.ops.cast(start_index, "int32")
    fits = keras.ops.logical_and(
        keras.ops.greater_equal(start, 0), keras.ops.less_equal(start + length, limit)
    )
    received = [f"{requirement} Received: positions ", start, "..", start + length - 1, "."]
    return check_in_graph(fits, received, value)


def check_token_id(name, value, vocabulary_size=None):
    """Raises a ValueError unless `value` is None or a non-negative int
    token id known when tracing (`end_token_id`, `pad_token_id`), and an id
    of the vocabulary when its size is given.

    Args:
        name: the argument's name, for the message.
        value: the value received.
        vocabulary_size: V, the width of the model's logits, when known: the
            id must then lie in [0, V) (an end id outside it is never
            generated, so rows would never end; a padding id outside it
            cannot be fed to the model).

    Raises:
        ValueError: if `value` is a bool, negative, not an int known before
            the graph runs, or not below `vocabulary_size`.
    """
    if value is None:
        return
    known = static_int(value)
    if isinstance(value, bool) or known is None or known < 0:
        raise ValueError(
            f"`{name}` must be a non-negative int token id or None. "
            f"Received: {name}={value!r}."
        )
    if vocabulary_size is not None and known >= vocabulary_size:
        raise ValueError(
            f"`{name}` must be an id of the model's vocabulary [0, {vocabulary_size}) "
            f"(the vocabulary size is the width of the model's logits): pass an id "
            f"below {vocabulary_size}. Received: {name}={value!r}."
        )


def check_prompt_ids(tokens, vocabulary_size=None, width=None):
    """Checks that the prompt's token ids are ids the model takes: >= 0,
    and below the input vocabulary size when it is known.

    An id outside fails inside the embedding's gather (TensorFlow) or is
    read as a clipped id (JAX). Ids known now (an eager prompt) are checked
    in Python; a traced prompt (a graph input) is checked inside the graph
    with the same message, from one pass over it (its min and max, once per
    generation call, not per step); see `check_in_graph`.

    Args:
        tokens: (B, T) int32 tensor, the ids the model reads (the prompt,
            padding after each row's length).
        vocabulary_size: the number of ids the model's token input takes
            (its embedding's size, which may exceed the logits' width, e.g.
            an input-only start token), or None when unknown (only negative
            ids are refused then).
        width: check `tokens[:, :width]` only (the prompt's part); None =
            all of it.

    Returns:
        `tokens`; traced ones come back depending on the in-graph check: use
        the returned value.

    Raises:
        ValueError: if the ids are known now and one lies outside the range.
            A traced prompt fails when the graph runs (TensorFlow:
            `InvalidArgumentError`, not checked under `jit_compile=True`,
            as XLA has no assertion; JAX: `JaxRuntimeError` wrapping the
            ValueError).
    """
    # No quote marks: TensorFlow escapes them in an assertion's text.
    if vocabulary_size is None:
        requirement = "`prompt` must hold token ids >= 0 (ids of the vocabulary of the model)."
    else:
        requirement = (
            f"`prompt` must hold token ids in [0, {vocabulary_size}), the ids the token "
            "embedding of the model takes: map unknown tokens to an id of the vocabulary."
        )

    ids = tokens if width is None else tokens[:, :width]
    return _check_id_range(tokens, ids, vocabulary_size, requirement, "prompt ids")


def check_int32_ids(name, ids):
    """Integer ids as int32, refusing values int32 cannot hold: a cast
    would wrap them silently (2**32 + 5 would be read as id 5). Now when the
    ids are known, else once in the graph (see `check_in_graph`).

    Args:
        name: the tensor's name, for the message (e.g. "prompt").
        ids: integer ids of any shape: a NumPy array, a Python list or a
            backend tensor.

    Returns:
        The ids as an int32 tensor (traced ones depending on the check).

    Raises:
        ValueError: if `ids` are not integers (floats would be truncated),
            or, known now, one lies outside int32 (the message gives the
            smallest and largest id).

    Example:
    >>> import numpy as np
    >>> try:
    ...     check_int32_ids("prompt", np.array([[1, 2**32 + 5]]))
    ... except ValueError as error:
    ...     print(error)
    `prompt` must hold ids that fit int32, the dtype the model reads them in (a cast would wrap larger ones). Received: ids from 1 to 4294967301.
    """
    if not hasattr(ids, "dtype"):
        ids = np.asarray(ids)
    dtype = keras.backend.standardize_dtype(ids.dtype)
    if "int" not in dtype or dtype == "bool":
        raise ValueError(
            f"`{name}` must hold integer ids (a cast would truncate other numbers). "
            f"Received dtype {dtype}."
        )
    if dtype in ("int8", "uint8", "int16", "uint16", "int32"):
        return keras.ops.cast(ids, "int32")
    bounds = np.iinfo(np.int32)
    requirement = (
        f"`{name}` must hold ids that fit int32, the dtype the model reads them in (a cast "
        "would wrap larger ones)."
    )
    ids = _check_id_range(ids, ids, bounds.max + 1, requirement, "ids", lowest_id=bounds.min)
    if isinstance(ids, np.ndarray):  # checked: the values fit
        ids = ids.astype(np.int32)
    return keras.ops.cast(ids, "int32")


def check_input_ids(name, ids, vocabulary_size, layer_name):
    """Checks the ids of a model input other than the tokens (a source
    sentence, a class label) against the embedding that reads them: in
    [0, `vocabulary_size`), as `check_prompt_ids` does for the prompt (now
    when the ids are known, else once in the graph).

    Args:
        name: the input's name (a key of the generation's `inputs`).
        ids: the input, integer ids of any shape.
        vocabulary_size: the number of ids the embedding takes.
        layer_name: the embedding's name, for the message.

    Returns:
        `ids`; traced ones come back depending on the in-graph check: use
        the returned value.

    Raises:
        ValueError: if the ids are known now and one lies outside the range
            (a traced input fails when the graph runs, as in
            `check_prompt_ids`).

    Example:

    >>> import numpy as np
    >>> try:
    ...     check_input_ids("class_label", np.array([3, 12]), 10, "class_embedding")
    ... except ValueError as error:
    ...     print(error)
    The model input class_label must hold ids in [0, 10), the ids its layer class_embedding takes. Received: ids from 3 to 12.
    """
    # No quote marks: TensorFlow escapes them in an assertion's text.
    requirement = (
        f"The model input {name} must hold ids in [0, {vocabulary_size}), the ids its "
        f"layer {layer_name} takes."
    )
    return _check_id_range(ids, ids, vocabulary_size, requirement, "ids")


def check_layer_ids(owner, what, ids, vocabulary_size, fix):
    """Checks the ids an embedding layer reads against its table: in
    [0, `vocabulary_size`). Now when the ids are known, else inside the
    graph (once per call; nothing inside `checked_by_caller`, where a
    generation loop feeds back ids it made).

    Without it an id outside the table fails inside TensorFlow's gather with
    an index of the layer's own making, or is read as a row of NaN (JAX),
    and a negative id silently reads another row.

    Args:
        owner: the layer; its class and name start the message.
        what: what the ids are, for the message (e.g. "token ids").
        ids: the ids, integer (or whole float) tensor of any shape.
        vocabulary_size: the rows of the layer's table.
        fix: what to do instead, for the message.

    Returns:
        `ids`; traced ones come back depending on the in-graph check: use
        the returned value.

    Raises:
        ValueError: if the ids are known now and one lies outside the range
            (traced ones fail when the graph runs: TensorFlow
            `InvalidArgumentError`, not checked under `jit_compile=True`;
            JAX `JaxRuntimeError` wrapping the ValueError).

    Example:
    >>> import keras
    >>> import numpy as np
    >>> embed = keras.layers.Embedding(20, 8, name="embedding")
    >>> try:
    ...     check_layer_ids(embed, "token ids", np.array([[3, 25, -1]]), 20,
    ...                     "Map unknown tokens to an id of the vocabulary.")
    ... except ValueError as error:
    ...     print(error)
    Embedding embedding: token ids must lie in [0, 20), the rows of its table. Map unknown tokens to an id of the vocabulary. Received: token ids from -1 to 25.
    """
    # No quote marks: TensorFlow escapes them in an assertion's text.
    requirement = (
        f"{type(owner).__name__} {owner.name}: {what} must lie in [0, {vocabulary_size}), "
        f"the rows of its table. {fix}"
    )
    return _check_id_range(ids, ids, vocabulary_size, requirement, what)


def _check_id_range(value, ids, vocabulary_size, requirement, what, lowest_id=0):
    """`value`, once `ids` (part of it) are known, or checked in the graph,
    to lie in [`lowest_id`, `vocabulary_size`) (>= `lowest_id` when the size
    is None)."""

    def is_valid(lowest, highest):
        if vocabulary_size is None:
            return lowest >= lowest_id
        return (lowest >= lowest_id) & (highest < vocabulary_size)

    known = known_value(ids)
    if known is not None:
        if known.size and not is_valid(known.min(), known.max()):
            raise ValueError(
                f"{requirement} Received: {what} from {known.min()} to {known.max()}."
            )
        return value
    if 0 in tuple(ids.shape):  # statically empty: no id to check
        return value
    lowest, highest = keras.ops.min(ids), keras.ops.max(ids)
    return check_in_graph(
        is_valid(lowest, highest),
        [f"{requirement} Received: {what} from ", lowest, " to ", highest, "."],
        value,
    )


def check_input_names(inputs, accepted, token_input):
    """Raises a ValueError if the dict `inputs` has names the model does not
    take (a typo would otherwise be ignored, the model running without it or
    refusing a missing input).

    Args:
        inputs: the `inputs=` of a generation function or of a decoder's
            `initial_state`: a dict by input name (other values pass).
        accepted: the names of the model's inputs besides the token input.
        token_input: the token input's name (the prompt fills it).

    Raises:
        ValueError: naming the unknown keys and listing the accepted ones.
    """
    if not isinstance(inputs, dict):
        return
    unknown = sorted((key for key in inputs if key not in accepted), key=str)
    if unknown:
        expected = (
            f"Accepted names: {list(accepted)}" if accepted
            else "This model takes no input besides its tokens: pass inputs=None"
        )
        raise ValueError(
            f"`inputs` has names the model does not take: {unknown}. {expected} (the "
            f"model's inputs besides its token input `{token_input}`, which the prompt "
            "fills). Fix the names or drop them. Received: inputs with names "
            f"{sorted(inputs, key=str)}."
        )


def check_no_cache_index(cache_index, cache_name="cache"):
    """Raises a ValueError when `cache_index` is given without a cache: it
    is the position of the inputs in the cache and means nothing without
    one (keras-hub's cached attention refuses it the same way).

    Args:
        cache_index: the value received (None = not given).
        cache_name: the cache argument's name, for the message.

    Raises:
        ValueError: if `cache_index` is not None.
    """
    if cache_index is not None:
        raise ValueError(
            f"`cache_index` is the position of the inputs in `{cache_name}` and is "
            f"only read with a cache. Received: cache_index={cache_index!r} and no "
            f"`{cache_name}`. Pass the cache from `init_cache`, or drop `cache_index`."
        )


def static_shape_mismatch(shape, expected):
    """Whether a static `shape` cannot be `expected`: another rank, or an
    axis whose size is known on both sides and differs. Axes unknown while
    tracing (None), and expected axes that are not ints (None, or a name
    such as "batch"), match any size.

    Args:
        shape: the tensor's static shape (a tuple; None for unknown axes).
        expected: the shape wanted, one entry per axis.

    Returns:
        bool: True when the shapes cannot agree.

    Example:
    >>> static_shape_mismatch((2, None, 8), ("batch", 5, 8)), static_shape_mismatch((2, 5), (3, None))
    (False, True)
    """
    return len(shape) != len(expected) or any(
        isinstance(want, int) and got is not None and got != want
        for got, want in zip(shape, expected)
    )


def check_cache(cache, expected_shape, origin):
    """Raises a ValueError unless `cache` is a floating tensor of the
    expected shape (a key/value cache of an attention layer).

    Args:
        cache: the cache received.
        expected_shape: its expected shape: ints for fixed axes, names
            (e.g. "batch", "max_length") for axes of any size, as the
            message shows them. Axes unknown while tracing pass.
        origin: where a valid one comes from, for the message (e.g. "as
            returned by `init_cache`").

    Raises:
        ValueError: if `cache` has no shape, another rank, another size on
            a fixed axis, or a dtype that is not floating (an integer or
            boolean cache would truncate the keys and values).
    """
    shape = tuple(getattr(cache, "shape", ()))
    if not shape or static_shape_mismatch(shape, expected_shape):
        raise ValueError(
            f"`cache` must have shape ({', '.join(map(str, expected_shape))}) {origin}. "
            f"Received: cache.shape={shape or type(cache).__name__}."
        )
    dtype = keras.backend.standardize_dtype(cache.dtype)
    if "float" not in dtype:
        raise ValueError(
            f"`cache` must be a floating-point tensor {origin}. Received: "
            f"cache.dtype={dtype}."
        )


def check_finite_positive_number(owner, name, value, meaning):
    """Raises a ValueError unless `value` is a finite real number > 0.

    (`check_positive_number_or_none` takes None and infinity; a
    wavelength, a coordinate scale or a layer norm's epsilon must be a
    finite number.)

    Args:
        owner: the layer whose argument is checked (its class name starts
            the message).
        name: the argument's name.
        value: the value received.
        meaning: what the number is, for the message.

    Raises:
        ValueError: if `value` is not a finite number > 0 (bools, strings,
            NaN and infinities refused).
    """
    if not _is_finite_real(value) or not value > 0:
        raise ValueError(
            f"{type(owner).__name__}: `{name}` must be a finite number > 0 "
            f"({meaning}). Received: {name}={value!r}."
        )


def check_max_wavelength(owner, value):
    """Raises a ValueError unless `value` is a finite number >= 1, the
    `max_wavelength` of a sinusoid position encoding.

    Feature pair i of the encoding turns at the frequency
    `max_wavelength^(-2i / D)`; pair 0 turns once per 2 pi positions
    whatever the value, so the longest wavelength is >= 1 by definition.
    Below 1 the frequencies grow with i instead, and a tiny value (1e-300)
    overflows float32 and fills the encoding with NaN.

    Args:
        owner: the layer whose argument is checked (its class name starts
            the message).
        value: the value received.

    Raises:
        ValueError: if `value` is not a finite number >= 1 (bools, strings,
            NaN and infinities refused).

    Example:
    >>> import keras
    >>> try:
    ...     check_max_wavelength(keras.layers.Layer(), 0.5)
    ... except ValueError as error:
    ...     print(error)  # doctest: +ELLIPSIS
    Layer: `max_wavelength` must be a finite number >= 1 (the longest ... Received: max_wavelength=0.5.
    """
    if not _is_finite_real(value) or not value >= 1:
        raise ValueError(
            f"{type(owner).__name__}: `max_wavelength` must be a finite number >= 1 "
            "(the longest wavelength of the sinusoids, in positions; 10000 in the "
            f"paper). Received: max_wavelength={value!r}."
        )


def check_finite_number(owner, name, value, meaning):
    """Raises a ValueError unless `value` is a finite real number (of any
    sign: a fill value, say).

    Args:
        owner, name, value, meaning: as in `check_finite_positive_number`.

    Raises:
        ValueError: if `value` is not a finite real number (bools, strings,
            None, NaN and infinities refused).

    Example:
    >>> import keras
    >>> try:
    ...     check_finite_number(keras.layers.Layer(), "fill_value", float("nan"), "the padding")
    ... except ValueError as error:
    ...     print(error)
    Layer: `fill_value` must be a finite real number (the padding). Received: fill_value=nan.
    """
    if not _is_finite_real(value):
        raise ValueError(
            f"{type(owner).__name__}: `{name}` must be a finite real number "
            f"({meaning}). Received: {name}={value!r}."
        )


def _is_finite_real(value):
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)


def check_bool(owner, name, value, meaning):
    """Raises a ValueError unless `value` is a Python bool.

    A flag read with `if` takes any value: "False" (a string) or 1 would
    switch the feature on without a word, and a config must hold plain
    bools.

    Args:
        owner: the layer (or any object) whose argument is checked; its class
            name starts the message. None for a function's argument.
        name: the argument's name.
        value: the value received.
        meaning: what True (and False) mean, for the message.

    Raises:
        ValueError: if `value` is not True or False (NumPy bools too: the
            message says to pass `bool(value)`).

    Example:
    >>> try:
    ...     check_bool(None, "mask_zero", "False", "True = id 0 is padding")
    ... except ValueError as error:
    ...     print(error)
    `mask_zero` must be True or False (True = id 0 is padding). Received: mask_zero='False'.
    """
    if not isinstance(value, bool):
        prefix = "" if owner is None else f"{type(owner).__name__}: "
        hint = f" Pass `{name}=bool({name})`." if isinstance(value, np.bool_) else ""
        raise ValueError(
            f"{prefix}`{name}` must be True or False ({meaning}). "
            f"Received: {name}={value!r}.{hint}"
        )


def check_layer_seed(owner, seed):
    """Raises a ValueError unless a layer's `seed` (of its dropout) is None
    or an int, as Keras' seed generators take it; checked when the layer is
    made, not at the first training call.

    Args:
        owner: the layer whose argument is checked; its class name starts the
            message.
        seed: the value received.

    Raises:
        ValueError: on a bool, a float, a string, a list, a NumPy integer
            (Keras refuses it too; the message says to pass `int(seed)`) or
            any other value.

    Example:
    >>> import keras
    >>> try:
    ...     check_layer_seed(keras.layers.Layer(), 1.5)
    ... except ValueError as error:
    ...     print(error)
    Layer: `seed` must be None or an int (the seed of the dropout, for reproducible runs). Received: seed=1.5.
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(
            f"{type(owner).__name__}: `seed` must be None or an int (the seed of the "
            f"dropout, for reproducible runs). Received: seed={seed!r}."
            f"{_python_int_hint('seed', seed)}"
        )


def check_rate(owner, name, value):
    """Raises a ValueError unless `value` is a rate (a dropout) in [0, 1).

    Args:
        owner: the layer (or any object) whose argument is checked; its class
            name starts the message. None for a function's argument (a
            model builder's `dropout`).
        name: the argument's name.
        value: the value received.

    Raises:
        ValueError: if `value` is not a real number in [0, 1) (bools and
            strings refused, NaN too).
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not 0.0 <= float(value) < 1.0
    ):
        prefix = "" if owner is None else f"{type(owner).__name__}: "
        raise ValueError(
            f"{prefix}`{name}` must be a number in [0, 1). Received: {name}={value!r}."
        )


def check_image_size(image_size, name="image_size", owner=None):
    """Reads an image size: one int for a square image, or (height, width).

    Args:
        image_size: a positive int, or a pair of positive ints.
        name: the argument's name, for the message.
        owner: the layer (or any object) whose argument it is; its class name
            starts the message. None for a function's argument.

    Returns:
        `(height, width)`, a tuple of two Python ints.

    Raises:
        ValueError: if `image_size` is neither (bools refused).
    """

    def is_int(v):
        return isinstance(v, numbers.Integral) and not isinstance(v, bool)

    size = None
    if is_int(image_size):
        size = (int(image_size), int(image_size))
    elif isinstance(image_size, (tuple, list)) and len(image_size) == 2 and all(map(is_int, image_size)):
        size = tuple(int(v) for v in image_size)
    if size is None or min(size) <= 0:
        prefix = "" if owner is None else f"{type(owner).__name__}: "
        raise ValueError(
            f"{prefix}`{name}` must be a positive int or a pair of positive "
            f"ints (height, width). Received: {name}={image_size!r}."
        )
    return size


def check_sizes(**sizes):
    """Raises a ValueError unless every keyword value is a positive int.

    Args:
        **sizes: argument name -> value received (bools are refused).

    Raises:
        ValueError: naming the first argument that is not a positive int.
    """
    for arg, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(
                f"`{arg}` must be a positive integer. Received: {arg}={value!r}."
                f"{_python_int_hint(arg, value)}"
            )


def check_batch_not_empty(name, value):
    """Refuses a batch of no rows: generation has nothing to generate for
    it. Now when the batch size is static, else when the graph runs (once
    per call; see `check_in_graph`).

    Args:
        name: the tensor's name, for the message (e.g. "prompt").
        value: a tensor of rank >= 1 whose first axis is the batch B.

    Returns:
        `value`, depending on the run-time check where there is one (use it
        in place of the original).

    Raises:
        ValueError: if B is 0 (the message gives the shape received), or
            `value` is a scalar or of unknown rank.

    Example:
    >>> import numpy as np
    >>> try:
    ...     check_batch_not_empty("prompt", np.zeros((0, 3), "int32"))
    ... except ValueError as error:
    ...     print(error)
    `prompt` must hold at least one row (batch size >= 1): there is nothing to generate for an empty batch. Received: prompt.shape=(0, 3).
    """
    requirement = (
        f"`{name}` must hold at least one row (batch size >= 1): there is nothing "
        f"to generate for an empty batch. Received: {name}.shape="
    )
    shape = value.shape
    if getattr(shape, "rank", 0) is None or len(shape) == 0:  # unknown rank, or a scalar
        raise ValueError(
            f"`{name}` must be a batch of rows (a tensor of rank >= 1). Received: "
            f"{name}.shape={shape}."
        )
    shape = tuple(shape)
    if shape[0] == 0:
        raise ValueError(f"{requirement}{shape}.")
    if shape[0] is not None:
        return value
    sizes = keras.ops.shape(value)
    received, text = [requirement, "(", sizes[0]], ""
    for axis, size in enumerate(shape[1:], start=1):  # static sizes as text
        if size is None:
            received += [text + ", ", sizes[axis]]
            text = ""
        else:
            text += f", {size}"
    if len(shape) == 1:
        text = ","  # "(0,)", as Python writes a 1-tuple
    return check_in_graph(keras.ops.greater(sizes[0], 0), received + [text + ")."], value)


def check_batch_size(name, value, batch_size, requirement):
    """Refuses a tensor whose batch (first axis) is not `batch_size`: two
    inputs of one call, or a model input and the prompt it is generated
    for, describe the same rows. Now when both sizes are static, else when
    the graph runs (once per call; see `check_in_graph`).

    Without it a mismatch failed deep inside the model, in a broadcast or a
    gather ("Incompatible shapes: [2,17,16] vs. [3,17,16]").

    Args:
        name: the tensor's name, for the message (e.g. "low_resolution").
        value: a tensor of rank >= 1 whose first axis is its batch.
        batch_size: the batch expected: an int, or a scalar int tensor
            (None, as a functional trace gives it: not checked).
        requirement: the message's first sentence: what the rows must match
            and how to fix it.

    Returns:
        `value`, depending on the run-time check where there is one (use it
        in place of the original).

    Raises:
        ValueError: if the sizes differ: `"{requirement} Received: {name}
            with batch size {b}, expected {batch_size}."`.

    Example:
    >>> import numpy as np
    >>> try:
    ...     check_batch_size("class_label", np.zeros((3,), "int32"), 2,
    ...                      "Pass one class label per prompt row.")
    ... except ValueError as error:
    ...     print(error)
    Pass one class label per prompt row. Received: class_label with batch size 3, expected 2.
    """
    if len(value.shape) == 0 or batch_size is None:
        # No batch axis (the caller's shape checks refuse it), or a symbolic
        # (Keras functional) trace: checked when called on values.
        return value
    rows = value.shape[0]
    expected = known_value(batch_size)
    if rows is not None and expected is not None:
        if rows != int(expected):
            raise ValueError(
                f"{requirement} Received: {name} with batch size {rows}, expected {int(expected)}."
            )
        return value
    rows = keras.ops.shape(value)[0]
    if rows is None:
        return value  # a symbolic trace of unknown batch
    return check_in_graph(
        keras.ops.equal(rows, batch_size),
        [f"{requirement} Received: {name} with batch size ", rows, ", expected ", batch_size, "."],
        value,
    )


def check_max_length(max_length, meaning):
    """Raises a ValueError unless `max_length` is a positive Python int.

    Args:
        max_length: the value received (bools refused; a tensor too: it is
            a static shape).
        meaning: what the length is, for the message (e.g. "the number of
            positions the caches hold, a static shape").

    Raises:
        ValueError: naming `max_length`, what it means and the value received.
    """
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length <= 0:
        raise ValueError(
            f"`max_length` must be a positive Python int: {meaning}. "
            f"Received: max_length={max_length!r}."
        )


def check_heads_divide(hidden_dim, num_heads):
    """Raises a ValueError unless `num_heads` divides `hidden_dim` (D = H x
    key_dim, as in Vaswani et al. 2017, section 3.2.2).

    Args:
        hidden_dim: D, the model width (positive int).
        num_heads: H (positive int).

    Raises:
        ValueError: if `hidden_dim % num_heads != 0`.
    """
    if hidden_dim % num_heads:
        raise ValueError(
            f"`hidden_dim` ({hidden_dim}) must be divisible by `num_heads` "
            f"({num_heads}): each head gets hidden_dim // num_heads features."
        )


# ------------------------------------------------------- sampling controls
# `sample` and the exporters built on it share these checks and messages.
# A value known now (Python number, NumPy scalar, eager tensor) is checked
# in Python and raises a ValueError; a traced one (a graph input under
# `tf.function`, a JAX tracer) is checked inside the graph and fails at run
# time with the same message. (No quote marks in these messages: TensorFlow
# escapes them in an assertion's text.)

TEMPERATURE_REQUIREMENT = (
    "`temperature` must be a finite number > 0 (1 = sample the predicted "
    "distribution as is, < 1 sharpens it, > 1 flattens it)."
)
TOP_K_REQUIREMENT = (
    "`top_k` must be a positive int (the number of most likely tokens kept), "
    "or None for no top-k filter."
)
TENSOR_TOP_K_REQUIREMENT = (
    "`top_k` must be >= 0 when given as a tensor (k most likely tokens kept; "
    "0 = no top-k filter)."
)
TOP_P_REQUIREMENT = (
    "`top_p` must be in (0, 1] (the nucleus mass kept; 1 = no nucleus filter)."
)


def known_value(value):
    """Returns `value` as a NumPy array when it is known now, else `None`.

    Python numbers, NumPy values and eager tensors are known; traced tensors
    (inside `tf.function`, a JAX trace) are not.

    Args:
        value: a Python/NumPy number or a backend tensor.

    Returns:
        `np.ndarray` or `None`.
    """
    if isinstance(value, (numbers.Number, np.generic, np.ndarray)):
        return np.asarray(value)
    try:
        return np.asarray(keras.ops.convert_to_numpy(value))
    except Exception:  # each backend refuses symbolic values its own way
        return None


def check_scalar(name, value, is_valid, requirement, dtype="float32", in_graph=True):
    """Checks one scalar argument now when its value is known, else in the graph.

    Args:
        name: the argument's name.
        value: a Python number or a scalar tensor, eager or traced.
        is_valid: `is_valid(x) -> bool`, the condition, written with
            Python operators only (`>`, `<=`, `&`, …) so that it holds for a
            NumPy value and for a backend tensor alike.
        requirement: the message's first sentence: what is expected and how
            to fix it. The message is `"{requirement} Received: {name}=…"`.
        dtype: `value` is cast to it before `is_valid`.
        in_graph: check a traced value inside the graph (False: only values
            known now are checked, e.g. in a function a caller has checked).

    Returns:
        `value`; a traced value comes back as a tensor that depends on the
        in-graph check (see `check_in_graph`): use the returned value.

    Raises:
        ValueError: if `value` is known now and not valid. A traced invalid
            value fails when the graph runs (TensorFlow:
            `InvalidArgumentError`; JAX: `JaxRuntimeError` wrapping the
            ValueError), with the same message.
    """
    known = known_value(value)
    if known is not None:
        # NumPy, not keras.ops: inside a `tf.function` ops on a Python
        # number would give a symbolic tensor.
        if not np.all(is_valid(known.astype(dtype))):
            shown = known.item() if known.ndim == 0 else known.tolist()
            raise ValueError(f"{requirement} Received: {name}={shown!r}.")
        return value
    if not in_graph:
        return value
    condition = is_valid(keras.ops.cast(value, dtype))
    return check_in_graph(condition, [f"{requirement} Received: {name}=", value, "."], value)


_CALLER_CHECKED = threading.local()


@contextlib.contextmanager
def checked_by_caller():
    """A scope in which `check_in_graph` adds no check to the graph being
    built where the scope is entered.

    For a caller that has checked once what every call it makes inside
    would check again: the generation loops make the cache, its index and
    the masks of each decoding step themselves (the index stays below the
    cache's capacity, the masks have the batch of the tokens), and the
    prompt, the caches and the user's masks went through the checks in the
    prefill (see `generation.decoding.step`). Without it, a served
    (non-XLA) decoding step of the JSB music generator ran twelve
    assertions (cache index, cache batch, padding masks, four per layer)
    at each of its positions. Checks of values known now (eager) still
    run; only traced checks are left out. On TensorFlow the scope covers
    the graph being built on entry only: a function traced inside it (a
    nested `tf.function`, whose trace is cached and reused outside) keeps
    its checks. The scope is per thread and restores the previous state on
    exit.

    Returns:
        A context manager (no value).

    Example:

    >>> import keras
    >>> with checked_by_caller():  # a failing check adds nothing here
    ...     value = check_in_graph(keras.ops.array(False), "not raised", keras.ops.ones(()))
    >>> float(value)
    1.0
    """
    previous = getattr(_CALLER_CHECKED, "graph", None)
    _CALLER_CHECKED.graph = _graph_being_built()
    try:
        yield
    finally:
        _CALLER_CHECKED.graph = previous


_ANY_TRACE = object()


def _graph_being_built():
    """TensorFlow's default graph (the `tf.function` being traced, or the
    eager context's); one token for other backends, whose traced calls
    (`jax.jit`) have no nested graph to tell apart."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.compat.v1.get_default_graph()
    return _ANY_TRACE


def check_in_graph(condition, message, value):
    """Makes a traced value fail at run time, with a message, where
    `condition` is False (nothing is added inside `checked_by_caller`).

    `keras.ops` has no assertion, so this dispatches on the backend:
    TensorFlow gets `tf.debugging.Assert`, which the returned value depends
    on (so it runs in `tf.function`, in SavedModels and under TF Serving's
    session loader; XLA has no assertion and drops it under
    `jit_compile=True`); JAX gets a `jax.debug.callback` that raises a
    ValueError (under `jax.jit` too; JAX reports it as a `JaxRuntimeError`
    holding the message). Other backends have no traced values here.

    Args:
        condition: bool scalar tensor.
        message: the message: a string, or a list of strings and scalar
            tensors (their run-time values), joined in order.
        value: the tensor to return.

    Returns:
        `value`, depending on the check where the backend needs that (use
        it in place of the original).
    """
    scope = getattr(_CALLER_CHECKED, "graph", None)
    if scope is not None and scope is _graph_being_built():
        return value
    pieces = [message] if isinstance(message, str) else list(message)
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        check = tf.debugging.Assert(condition, pieces, summarize=16)
        with tf.control_dependencies([check]):
            return tf.identity(value)
    if backend == "jax":
        import jax

        tensors = [piece for piece in pieces if not isinstance(piece, str)]

        def fail_unless(ok, *received):
            if np.all(ok):
                return
            received = iter(received)
            text = "".join(
                piece if isinstance(piece, str) else repr(np.asarray(next(received)).tolist())
                for piece in pieces
            )
            raise ValueError(text)

        jax.debug.callback(fail_unless, condition, *tensors)
    return value


def _check_scalar_tensor(name, value, integer):
    """Refuses tensors that are not scalars of a number dtype."""
    if not (hasattr(value, "dtype") and hasattr(value, "shape")):
        return
    dtype = keras.backend.standardize_dtype(value.dtype)
    number = "int" in dtype if integer else ("int" in dtype or "float" in dtype)
    if not number or len(value.shape) != 0:
        kind = "an integer scalar" if integer else "a number scalar"
        raise ValueError(
            f"A tensor `{name}` must be {kind} (rank 0). Received dtype {dtype}, "
            f"shape {tuple(value.shape)}."
        )


def check_temperature(temperature, in_graph=True):
    """Checks a sampling temperature (finite, > 0); see `check_scalar`.

    Args:
        temperature: Python number or number scalar tensor.
        in_graph: check a traced value in the graph.

    Returns:
        `temperature` (traced: depending on its check).

    Raises:
        ValueError: on a bool, a non-scalar tensor, or a value known now
            that is not a finite number > 0.
    """
    if isinstance(temperature, bool) or not (
        isinstance(temperature, numbers.Real) or hasattr(temperature, "dtype")
    ):
        raise ValueError(f"{TEMPERATURE_REQUIREMENT} Received: temperature={temperature!r}.")
    _check_scalar_tensor("temperature", temperature, integer=False)

    def is_valid(t):
        return (t > 0.0) & (t < float("inf"))  # NaN fails both

    return check_scalar(
        "temperature", temperature, is_valid, TEMPERATURE_REQUIREMENT, "float32", in_graph
    )


def check_top_k(top_k, in_graph=True):
    """Checks a top-k: a positive Python int, or an int scalar tensor >= 0
    (0 = no filter, the form a graph input takes).

    Args:
        top_k: int or int scalar tensor (not None).
        in_graph: check a traced value in the graph.

    Returns:
        `top_k` (traced: depending on its check).

    Raises:
        ValueError: on a Python value that is not a positive int, a tensor
            that is not an integer scalar, or a tensor known now below 0.
    """
    if not hasattr(top_k, "dtype") or isinstance(top_k, (numbers.Number, np.generic)):
        if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k <= 0:
            raise ValueError(f"{TOP_K_REQUIREMENT} Received: top_k={top_k!r}.")
        return top_k
    _check_scalar_tensor("top_k", top_k, integer=True)
    return check_scalar(
        "top_k", top_k, lambda k: k >= 0, TENSOR_TOP_K_REQUIREMENT, "int32", in_graph
    )


def check_top_p(top_p, in_graph=True):
    """Checks a nucleus mass `top_p` (float, or float scalar tensor; not
    None): in (0, 1]. As `check_top_k`, a traced value is checked in the
    graph when `in_graph`, and `top_p` is returned.

    Raises:
        ValueError: on a bool, a non-scalar tensor, or a value known now
            outside (0, 1].
    """
    if isinstance(top_p, bool) or not (isinstance(top_p, numbers.Real) or hasattr(top_p, "dtype")):
        raise ValueError(f"{TOP_P_REQUIREMENT} Received: top_p={top_p!r}.")
    _check_scalar_tensor("top_p", top_p, integer=False)

    def is_valid(p):
        return (p > 0.0) & (p <= 1.0)  # NaN fails both

    return check_scalar("top_p", top_p, is_valid, TOP_P_REQUIREMENT, "float32", in_graph)


def check_sampling_arguments(temperature=1.0, top_k=None, top_p=None):
    """Checks the controls of `keras_attn.generation.sample` at once.

    Args:
        temperature: finite number > 0 (Python or scalar tensor).
        top_k: None, a positive int, or an int scalar tensor >= 0.
        top_p: None, or a number (or scalar tensor) in (0, 1].

    Returns:
        `(temperature, top_k, top_p)`, traced ones depending on their
        in-graph checks: use these.

    Raises:
        ValueError: on a value known now that is out of range, or a tensor
            of the wrong dtype or rank (see `check_temperature`,
            `check_top_k`, `check_top_p`).
    """
    temperature = check_temperature(temperature)
    if top_k is not None:
        top_k = check_top_k(top_k)
    if top_p is not None:
        top_p = check_top_p(top_p)
    return temperature, top_k, top_p


def check_seed(seed):
    """Checks a sampling seed: an int (Python or NumPy), or an integer tensor
    (or array) of shape (), (1,) or (2,), eager or traced.

    Args:
        seed: the value received.

    Raises:
        ValueError: on a bool, a float (it would be truncated), a string,
            None, an int that does not fit 64 bits, or a tensor that is not
            of an integer dtype or of another shape.
    """
    requirement = (
        "`seed` must be an int, or an int tensor of shape () or (2,) (stateless "
        "seed: the same seed gives the same tokens); pass e.g. seed=42 or "
        "int(seed)."
    )
    if isinstance(seed, bool):
        raise ValueError(f"{requirement} Received: seed={seed!r}.")
    if isinstance(seed, numbers.Integral):
        if not -(2**63) <= seed < 2**64:
            raise ValueError(
                "`seed` must fit 64 bits (-2**63 to 2**64 - 1): only its low 64 bits "
                "are read, so a larger one would draw the tokens of a smaller one. "
                f"Received: seed={seed!r}."
            )
        return
    if isinstance(seed, (list, tuple)):
        try:
            seed = np.asarray(seed)
        except ValueError:  # ragged
            raise ValueError(f"{requirement} Received: seed={seed!r}.") from None
    if not (hasattr(seed, "dtype") and hasattr(seed, "shape")):
        raise ValueError(f"{requirement} Received: seed={seed!r} ({type(seed).__name__}).")
    try:
        dtype = keras.backend.standardize_dtype(seed.dtype)
    except ValueError:  # e.g. NumPy strings
        dtype = str(seed.dtype)
    shape = tuple(seed.shape)
    if "int" not in dtype or dtype == "bool" or shape not in ((), (1,), (2,)):
        raise ValueError(
            f"{requirement} Received: seed of dtype {dtype} and shape {shape}."
        )


def check_beam_arguments(num_beams, length_penalty_alpha):
    """Checks `beam_search`'s beam count and length-penalty exponent.

    Args:
        num_beams: K, the value received.
        length_penalty_alpha: alpha, the value received.

    Raises:
        ValueError: if `num_beams` is not a positive Python int (bools
            refused), or `length_penalty_alpha` is not a finite number >= 0
            (bools, NaN and infinities refused: they make the scores
            log P / lp NaN or infinite, which rank nothing).
    """
    if isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams <= 0:
        raise ValueError(
            f"`num_beams` must be a positive int. Received: num_beams={num_beams!r}."
        )
    alpha = length_penalty_alpha
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, numbers.Real)
        or not math.isfinite(alpha)
        or alpha < 0
    ):
        raise ValueError(
            "`length_penalty_alpha` must be a number >= 0 and finite (0.6 in Vaswani "
            "et al. 2017; 0 = rank by log-probability alone). Received: "
            f"length_penalty_alpha={alpha!r}."
        )


# ------------------------------------------------------------- token ids


def check_suppressed_token_ids(suppressed_token_ids, end_token_id=None, vocabulary_size=None):
    """Checks the ids a model must never generate (padding, start, …).

    Args:
        suppressed_token_ids: None or a sequence of non-negative Python ints.
        end_token_id: the end id, if any: it cannot be suppressed (rows could
            never end).
        vocabulary_size: V when known: ids must lie in [0, V) and leave at
            least one id to generate.

    Returns:
        A sorted tuple of distinct ints (empty for None).

    Raises:
        ValueError: on ids that are not non-negative ints, the end id among
            them, ids outside the vocabulary, or every id suppressed.
    """
    if suppressed_token_ids is None:
        return ()
    if isinstance(suppressed_token_ids, (numbers.Number, str, bytes)) or not all(
        isinstance(i, numbers.Integral) and not isinstance(i, bool) and i >= 0
        for i in _iterate(suppressed_token_ids)
    ):
        raise ValueError(
            "`suppressed_token_ids` must be a list of non-negative int token ids "
            "(e.g. padding and start: the ids a model never generates), or None. "
            f"Received: suppressed_token_ids={suppressed_token_ids!r}."
        )
    ids = tuple(sorted({int(i) for i in suppressed_token_ids}))
    if end_token_id is not None and int(end_token_id) in ids:
        raise ValueError(
            "`end_token_id` cannot be suppressed: rows could never end. Remove it "
            f"from `suppressed_token_ids`. Received: end_token_id={end_token_id}, "
            f"suppressed_token_ids={suppressed_token_ids!r}."
        )
    if vocabulary_size is not None:
        if ids and ids[-1] >= vocabulary_size:
            raise ValueError(
                "`suppressed_token_ids` must be ids of the model's vocabulary "
                f"[0, {vocabulary_size}). Received: suppressed_token_ids="
                f"{suppressed_token_ids!r}."
            )
        if len(ids) >= vocabulary_size:
            raise ValueError(
                "`suppressed_token_ids` leaves no token to generate: suppress fewer "
                f"than the {vocabulary_size} ids of the vocabulary. Received: "
                f"suppressed_token_ids={suppressed_token_ids!r}."
            )
    return ids


def _iterate(values):
    try:
        return list(values)
    except TypeError:
        return [None]  # not iterable: refused by the caller's check
