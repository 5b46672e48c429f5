"""JSB Chorales on the 16th-note grid: loading, tokens voice by voice per step, and MIDI.

`keras_attn.preprocessing.music` re-exports every public name here.
"""

import json
import os

import numpy as np

from keras_attn import checks
from keras_attn.preprocessing.midi import _check_midi_header, _score
from keras_attn.preprocessing.performance_events import NUM_PITCHES, _check_ids

# --- JSB Chorales vocabulary ---------------------------------------------
JSB_PAD_ID = 0
JSB_START_ID = 1
JSB_END_ID = 2
JSB_REST_ID = 3
JSB_PITCH_OFFSET = 4
JSB_VOCABULARY_SIZE = JSB_PITCH_OFFSET + NUM_PITCHES  # 132
JSB_NUM_VOICES = 4
JSB_VOICES = ("soprano", "alto", "tenor", "bass")
JSB_FILENAME = "Jsb16thSeparated.json"


# --- JSB Chorales -----------------------------------------------------------
def _check_grid(grid):
    """`grid` as a (steps, 4) int64 array of MIDI pitches 0..127 and -1."""
    grid = np.asarray(grid)
    numeric = grid.dtype.kind in "iuf" and grid.size > 0
    pitches = numeric and np.isin(grid, range(-1, NUM_PITCHES)).all()
    if not (pitches and grid.shape[1:] == (JSB_NUM_VOICES,)):
        values = f"values from {grid.min()} to {grid.max()}" if numeric else f"dtype {grid.dtype}"
        expected = "Expected a grid of shape (steps, 4) of pitches 0..127 or -1 (rest)"
        raise ValueError(f"{expected}. Received: shape {grid.shape}, {values}.")
    return grid.astype(np.int64)


def load_jsb_chorales(path, split="train"):
    """Loads the JSB Chorales 16th-note grids with four separate voices.

    Args:
        path: `Jsb16thSeparated.json`, or a folder holding it (e.g. `examples/music/data`).
        split: a key of the file: `"train"` (229 chorales) or `"valid"` (76).

    Returns:
        list of np.int32 arrays (steps, 4): per 16th note the pitch of S, A, T, B, -1 = rest.

    Raises:
        ValueError: if the file is missing or not the expected JSON, or lacks `split`.

    Example:
    >>> import json, os, tempfile
    >>> from keras_attn.preprocessing.music import JSB_FILENAME, load_jsb_chorales
    >>> data = {"train": [[[74, 70, 65, 58], [74, -1, 65, 58]]], "valid": []}
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     with open(os.path.join(folder, JSB_FILENAME), "w") as handle:
    ...         json.dump(data, handle)
    ...     chorales = load_jsb_chorales(folder)  # the folder or the file itself
    >>> chorales[0].tolist()
    [[74, 70, 65, 58], [74, -1, 65, 58]]

    Reference:
        Boulanger-Lewandowski et al. 2012; Huang et al. 2017 (Coconet); Huang et al. 2018, 4.1.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, JSB_FILENAME)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as error:  # missing, not UTF-8 or not JSON
        expected = f"Expected the JSB Chorales JSON file {JSB_FILENAME} or its folder"
        raise ValueError(f"{expected}. Received: path {path!r} ({error}).") from None
    available = sorted(data) if isinstance(data, dict) else type(data).__name__
    fix = "The copy shipped with this project leaves out the test split; the official file has it."
    fix = fix if split == "test" else ""
    ok = isinstance(data, dict) and split in data
    checks.require(ok, "split", split, f"one of {available}", fix)
    return [_check_grid(chorale).astype(np.int32) for chorale in data[split]]


def chorale_to_tokens(grid, add_start_end=False):
    """Serializes a chorale grid voice by voice per step: S, A, T, B, S, A, ...

    Args:
        grid: int array (steps, 4) of MIDI pitches, -1 for a rest.
        add_start_end: put `JSB_START_ID` first and `JSB_END_ID` last.

    Returns:
        np.int32 (4 * steps [+ 2],): `JSB_PITCH_OFFSET + pitch`, `JSB_REST_ID` for a rest.

    Raises:
        ValueError: if `grid` is not (steps, 4) with values in -1..127.

    Example:
    >>> from keras_attn.preprocessing.music import chorale_to_tokens
    >>> grid = [[74, 70, 65, 58], [74, -1, 65, 58]]  # 2 steps; the alto rests in the second
    >>> chorale_to_tokens(grid).tolist()  # pitch + 4, rest = 3
    [78, 74, 69, 62, 78, 3, 69, 62]
    """
    grid = _check_grid(grid)
    tokens = np.where(grid < 0, JSB_REST_ID, grid + JSB_PITCH_OFFSET).reshape(-1)
    if add_start_end:
        tokens = np.concatenate([[JSB_START_ID], tokens, [JSB_END_ID]])
    return tokens.astype(np.int32)


def tokens_to_chorale(tokens):
    """Inverse of `chorale_to_tokens`: skips PAD and START, stops at END.

    Args:
        tokens: 1-D integer array of ids in [0, JSB_VOCABULARY_SIZE).

    Returns:
        np.int32 array (steps, 4) of MIDI pitches, -1 for a rest.

    Raises:
        ValueError: for ids outside the vocabulary, or not a positive multiple of 4 notes.

    Example:
    >>> from keras_attn.preprocessing.music import chorale_to_tokens, tokens_to_chorale
    >>> tokens = chorale_to_tokens([[74, 70, 65, 58]], add_start_end=True)
    >>> tokens_to_chorale(tokens).tolist()
    [[74, 70, 65, 58]]
    """
    tokens = _check_ids(tokens, JSB_VOCABULARY_SIZE, "chorale token")
    ends = np.flatnonzero(tokens == JSB_END_ID)
    tokens = tokens[: ends[0]] if ends.size else tokens
    tokens = tokens[tokens >= JSB_REST_ID]
    if tokens.size == 0 or tokens.size % JSB_NUM_VOICES:
        raise ValueError(f"Expected a positive multiple of 4 note tokens. Received: {tokens.size}.")
    grid = np.where(tokens == JSB_REST_ID, -1, tokens - JSB_PITCH_OFFSET)
    return grid.reshape(-1, JSB_NUM_VOICES).astype(np.int32)


def transpose_chorale_tokens(tokens, semitones):
    """Transposes chorale tokens by whole semitones: every pitch id moves, the rest are kept.

    Args:
        tokens: 1-D integer array of ids in [0, JSB_VOCABULARY_SIZE) (`chorale_to_tokens`).
        semitones: whole number (the paper's augmentation: -3..3, `AUGMENTATION_SEMITONES`).

    Returns:
        np.int32 array like `tokens`: pitch ids plus `semitones`; PAD, START, END, REST kept.

    Raises:
        ValueError: for ids outside the vocabulary, a fractional shift, a pitch leaving 0..127.

    Example:
    >>> from keras_attn.preprocessing.music import chorale_to_tokens
    >>> from keras_attn.preprocessing.jsb_chorales import transpose_chorale_tokens
    >>> tokens = chorale_to_tokens([[74, -1, 65, 58]], add_start_end=True)  # alto rests
    >>> transpose_chorale_tokens(tokens, 2).tolist()  # [START, 76 + 4, REST, 67 + 4, 60 + 4, END]
    [1, 80, 3, 71, 64, 2]

    Reference:
        Huang et al. 2018, section 5.2 (transposition by -3..3 semitones).
    """
    tokens = _check_ids(tokens, JSB_VOCABULARY_SIZE, "chorale token")
    ok = checks.is_number(semitones) and float(semitones).is_integer()
    checks.require(ok, "semitones", semitones, "a whole number")
    is_pitch = tokens >= JSB_PITCH_OFFSET
    pitches = tokens[is_pitch] - JSB_PITCH_OFFSET + int(semitones)
    if pitches.size and (pitches.min() < 0 or pitches.max() >= NUM_PITCHES):
        received = f"pitches from {pitches.min()} to {pitches.max()}"
        raise ValueError(
            f"Expected pitches in 0..127 after {semitones} semitones. Received: {received}."
        )
    return np.where(is_pitch, tokens + int(semitones), tokens).astype(np.int32)


def chorale_to_midi(grid, tempo=120.0, program=0, velocity=80):
    """Writes a chorale grid as MIDI: one track per voice, a held pitch as one note.

    Args:
        grid: int array (steps, 4), soprano, alto, tenor, bass; -1 = rest.
        tempo: quarter notes per minute.
        program: General MIDI program of all four voices (0 = piano).
        velocity: velocity of every note (the data has none).

    Returns:
        `symusic.Score` (480 ticks per quarter) with tracks "Soprano", "Alto", "Tenor", "Bass".

    Raises:
        ValueError: for a bad `grid`, `tempo`, `program` or `velocity`.

    Example:
    >>> from keras_attn.preprocessing.music import chorale_to_midi
    >>> score = chorale_to_midi([[74, 70, 65, 58], [74, -1, 65, 58]])
    >>> [(note.time, note.duration) for note in score.tracks[0].notes]  # 120 ticks a step
    [(0, 240)]

    Reference:
        Huang et al. 2018, section 4.1.
    """
    grid = _check_grid(grid)
    checks.require(checks.is_int(velocity, 1, 127), "velocity", velocity, "an int in 1..127")
    resolution = 480
    _check_midi_header(tempo, resolution, program)
    ticks_per_step = resolution // 4
    tracks = []
    for voice, name in enumerate(JSB_VOICES):
        line = grid[:, voice]
        # A note starts where the pitch changes (or after a rest) and runs
        # until the next change.
        changes = np.flatnonzero(np.diff(line, prepend=-2, append=-2) != 0)
        begins, ends = changes[:-1], changes[1:]
        sounding = line[begins] >= 0
        begins, ends = begins[sounding], ends[sounding]
        start_ticks, end_ticks = begins * ticks_per_step, ends * ticks_per_step
        velocities = np.full(len(begins), velocity)
        tracks.append((name.capitalize(), start_ticks, end_ticks, line[begins], velocities))
    return _score(tempo, resolution, program, tracks)
