"""The signatures of the three served models, and the NumPy inputs a client sends them.

`SIGNATURES` holds each model's signatures exactly as the keras_attn exporters write them
(checked by tests/export/test_serving_client.py); `make_inputs` and the per-model helpers
check and cast a request's values against them before anything is sent. Needs only NumPy.
"""

import dataclasses

import numpy as np

DEFAULT_SIGNATURE = "serving_default"
# Ids shared by the exported models (keras_attn.preprocessing.subword_tokenizer / music).
TEXT_PAD_ID, TEXT_UNKNOWN_ID, TEXT_START_ID, TEXT_END_ID = 0, 1, 2, 3
MUSIC_PAD_ID, MUSIC_START_ID = 0, 1


@dataclasses.dataclass(frozen=True)
class Spec:
    """A signature tensor as a client sees it: dtype name and shape (None = any size)."""

    dtype: str  # a NumPy dtype name, or "string" (TF's DT_STRING: bytes)
    shape: tuple


@dataclasses.dataclass(frozen=True)
class Signature:
    inputs: dict
    outputs: dict


_TOKENS = Signature(
    inputs={"encoder_tokens": Spec("int32", (None, None))},
    outputs={"tokens": Spec("int32", (None, None))},
)
_SAMPLE_MUSIC = Signature(
    inputs={
        "primer": Spec("int32", (None, None)),
        "num_steps": Spec("int32", ()),
        "temperature": Spec("float32", ()),
        "top_k": Spec("int32", ()),
        "top_p": Spec("float32", ()),
        "seed": Spec("int32", ()),
    },
    outputs={"events": Spec("int32", (None, None))},
)
# The streaming signatures: the request, then the loop's state (README.md, "Streaming").
_STREAM_STATE = {
    "events": Spec("int32", (None, 1)),
    "cache": Spec("float32", (None, None, None)),  # (B, position, C): C fixed by the model
    "finished": Spec("bool", (None,)),
}
_STREAM_OUTPUTS = Signature(
    inputs=_SAMPLE_MUSIC.inputs,
    outputs={**_STREAM_STATE, "position": Spec("int32", ()), "done": Spec("bool", ())},
)
_STEP_MUSIC = Signature(
    inputs={**_SAMPLE_MUSIC.inputs, **_STREAM_STATE}, outputs=_STREAM_OUTPUTS.outputs
)
_IMAGE = Spec("uint8", (None, None, None, 3))
# The translator's sampling controls (top_k 1: greedy search) and streaming state (README.md,
# "Streaming translation"): the target tokens so far, the caches, the encoder memory.
_CONTROLS = {name: _SAMPLE_MUSIC.inputs[name] for name in ("temperature", "top_k", "top_p", "seed")}
_TRANSLATION_STATE = {
    "tokens": Spec("int32", (None, None)),
    "cache": Spec("float32", (None, None, None)),  # (B, position, C)
    "finished": Spec("bool", (None,)),
}
_MEMORY = {"memory": Spec("float32", (None, None, None))}  # (B, S, M)


def _translation_signatures(source, text):
    """`sample_tokens`, `prefill` (taking `source`) and `step` of a translator export."""
    translation = {"translation": Spec("string", (None,))} if text else {}
    outputs = {**_TRANSLATION_STATE, "position": Spec("int32", ()), "done": Spec("bool", ())}
    return {
        "sample_tokens": Signature(inputs={**_TOKENS.inputs, **_CONTROLS}, outputs=_TOKENS.outputs),
        "prefill": Signature(
            inputs={**source, **_CONTROLS}, outputs={**outputs, **_MEMORY, **translation}
        ),
        "step": Signature(
            inputs={**_CONTROLS, **_TRANSLATION_STATE, **_MEMORY},
            outputs={**outputs, **translation},
        ),
    }


# Model kind -> signature name -> Signature. The kinds are the default model
# names of README.md's models.config.
SIGNATURES = {
    # export_translator(...): strings in, strings out (needs TF Text ops on the server).
    "translator": {
        "serving_default": Signature(
            inputs={"text": Spec("string", (None,))},
            outputs={"translation": Spec("string", (None,))},
        ),
        "translate_tokens": _TOKENS,
        **_translation_signatures({"text": Spec("string", (None,))}, text=True),
    },
    # export_translator(..., include_text_signature=False): token ids only, no TF Text op.
    "translator_tokens": {
        "serving_default": _TOKENS,
        **_translation_signatures(_TOKENS.inputs, text=False),
    },
    # export_super_resolver(...): the low-resolution size (h, w) is fixed at export.
    "super_resolver": {
        "serving_default": Signature(inputs={"image": _IMAGE}, outputs={"image": _IMAGE}),
        "sample_with_options": Signature(
            inputs={
                "image": _IMAGE,
                "temperature": Spec("float32", ()),
                "seed": Spec("int64", ()),
                "top_k": Spec("int32", ()),
                "top_p": Spec("float32", ()),
            },
            outputs={"image": _IMAGE},
        ),
    },
    # export_music_generator(...)
    "music_generator": {
        "serving_default": _SAMPLE_MUSIC,
        "generate": _SAMPLE_MUSIC,
        "prefill": _STREAM_OUTPUTS,
        "step": _STEP_MUSIC,
    },
}


def signature(model, signature_name=DEFAULT_SIGNATURE):
    """The `Signature` of `SIGNATURES[model][signature_name]`.

    Raises:
        ValueError: for an unknown model kind or signature name.
    """
    if model not in SIGNATURES:
        raise ValueError(f"Unknown model {model!r}. Expected one of {sorted(SIGNATURES)}.")
    if signature_name not in SIGNATURES[model]:
        raise ValueError(
            f"Model {model!r} has no signature {signature_name!r}. Expected one of "
            f"{sorted(SIGNATURES[model])}."
        )
    return SIGNATURES[model][signature_name]


# ---------------------------------------------------------------- inputs


def _as_array(name, value, spec):
    if spec.dtype == "string":
        items = np.asarray(value, dtype=object)
        flat = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in items.reshape(-1)]
        array = np.array(flat + [None], dtype=object)[:-1].reshape(items.shape)
    else:
        array = np.asarray(value)
        if array.dtype == object or array.dtype.kind not in "biuf":
            raise ValueError(
                f"`{name}` must be numeric ({spec.dtype}). Received dtype {array.dtype}."
            )
        if np.dtype(spec.dtype).kind in "iu" and array.dtype.kind == "f":
            if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
                raise ValueError(f"`{name}` must hold integers ({spec.dtype}). Received {value!r}.")
        if np.dtype(spec.dtype).kind in "iu" and array.size:
            info = np.iinfo(spec.dtype)
            if array.min() < info.min or array.max() > info.max:
                raise ValueError(
                    f"`{name}` is out of the {spec.dtype} range [{info.min}, {info.max}]. "
                    f"Received min {array.min()}, max {array.max()}."
                )
        array = array.astype(spec.dtype)
    if array.ndim != len(spec.shape) or any(
        want is not None and got != want for got, want in zip(array.shape, spec.shape)
    ):
        expected = "(" + ", ".join("?" if d is None else str(d) for d in spec.shape) + ")"
        raise ValueError(
            f"`{name}` must have shape {expected} ({spec.dtype}). Received shape {array.shape}."
        )
    return array


def make_inputs(model, signature_name=DEFAULT_SIGNATURE, **values):
    """NumPy inputs for a signature: exactly its names, cast to its dtypes.

    Args:
        model: a key of `SIGNATURES`.
        signature_name: a signature of that model.
        **values: one array-like per input name (strings as `str` or `bytes`).

    Returns:
        dict name -> `np.ndarray` (strings: object arrays of `bytes`).

    Raises:
        ValueError: on missing or unexpected names, non-numeric or
            out-of-range values, or a shape of the wrong rank or size.
    """
    spec = signature(model, signature_name)
    missing = sorted(set(spec.inputs) - set(values))
    unexpected = sorted(set(values) - set(spec.inputs))
    if missing or unexpected:
        raise ValueError(
            f"Signature {signature_name!r} of {model!r} takes inputs {sorted(spec.inputs)}. "
            f"Missing: {missing}; unexpected: {unexpected}."
        )
    return {name: _as_array(name, values[name], spec.inputs[name]) for name in spec.inputs}


def translator_inputs(sentences):
    """`serving_default` inputs of the translator: (B,) UTF-8 strings."""
    if isinstance(sentences, (str, bytes)):
        sentences = [sentences]
    return make_inputs("translator", text=list(sentences))


def super_resolver_inputs(images, temperature=None, seed=None, top_k=None, top_p=None):
    """Inputs of the super resolver, and the signature that takes them.

    Args:
        images: (B, h, w, 3) uint8 low-resolution RGB images (h, w as exported).
        temperature: optional float > 0; any of the options picks
            `sample_with_options` (defaults: temperature 1.0, seed 0, top_k 0,
            top_p 1.0).
        seed: optional int; the same seed and images give the same output.
        top_k: optional int >= 0: sample among the k most likely intensities
            (0 = all).
        top_p: optional float in (0, 1]: nucleus sampling (1 = no filter).

    Returns:
        `(signature_name, inputs)`.
    """
    if temperature is None and seed is None and top_k is None and top_p is None:
        return DEFAULT_SIGNATURE, make_inputs("super_resolver", image=images)
    temperature = 1.0 if temperature is None else temperature
    if not temperature > 0:
        raise ValueError(f"`temperature` must be > 0. Received: temperature={temperature!r}.")
    top_k = 0 if top_k is None else top_k
    if not top_k >= 0:
        raise ValueError(f"`top_k` must be >= 0 (0 = all intensities). Received: top_k={top_k!r}.")
    top_p = 1.0 if top_p is None else top_p
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"`top_p` must be in (0, 1] (1 = no filter). Received: top_p={top_p!r}.")
    inputs = make_inputs(
        "super_resolver",
        "sample_with_options",
        image=images,
        temperature=temperature,
        seed=0 if seed is None else seed,
        top_k=top_k,
        top_p=top_p,
    )
    return "sample_with_options", inputs


def music_generator_inputs(primer, num_steps, temperature=1.0, top_k=0, top_p=1.0, seed=0):
    """`serving_default` inputs of the music generator.

    Args:
        primer: event-id rows, each starting with the start token 1; rows of
            different lengths are right-padded with 0 here.
        num_steps: events to generate after each row's primer.
        temperature: float > 0 (1 = the model's distribution).
        top_k: keep the k most likely events per step (0 = off).
        top_p: nucleus mass in (0, 1] (1 = off).
        seed: int; same seed, same events.

    Returns:
        dict of inputs (`primer` (B, T) int32, the rest scalars).
    """
    rows = [list(row) for row in primer]
    if not rows or not all(rows):
        raise ValueError(
            "`primer` needs at least one row of at least one event (e.g. [[1]], the start "
            f"token). Received: {primer!r}."
        )
    width = max(len(row) for row in rows)
    padded = [row + [MUSIC_PAD_ID] * (width - len(row)) for row in rows]
    return make_inputs(
        "music_generator",
        primer=padded,
        num_steps=num_steps,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
    )
