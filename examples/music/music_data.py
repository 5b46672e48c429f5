"""Music data for the examples: JSB Chorales and MIDI performances as event
sequences, and the tf.data pipelines that crop, augment and batch them.

Two tasks of the Music Transformer paper (Huang et al. 2018):

* `jsb`: J.S. Bach chorales on a 16th-note grid, serialised soprano, alto,
  tenor, bass per step (`keras_attn.preprocessing.music.chorale_to_tokens`),
  vocabulary `music.JSB_VOCABULARY_SIZE` (132). The Boulanger-Lewandowski
  split: 229 training and 76 validation chorales. The file shipped in
  `examples/music/data/` is the full data set.
* `performance`: MIDI performances as performance events (note-on, note-off,
  10 ms time shifts, velocity bins; `music.midi_to_events`), vocabulary
  `music.VOCABULARY_SIZE` (391). Any folder of .mid files; `pop909` for
  all of POP909 through `keras_attn.datasets.pop909` (an offline folder,
  else its cache, else a download: `resolve_midi_dir`); by default POP909
  where the project's shared data folder holds it (`shared_data_dir()`),
  else the six POP909 songs shipped in `examples/music/data/pop909/`
  (enough for the demo to run, not to learn).
  Files are split deterministically by a hash of their name (1 in 10 to
  validation), so the split stays the same when files are added.

The layout of an example (both tasks). Each piece is its tokens followed by
`END` (id 2). A training example is a window of L consecutive tokens of a
piece, preceded by `START` (id 1): inputs `[START, w_0 .. w_{L-2}]`,
targets `[w_0 .. w_{L-1}]`, padded with 0 when the piece is shorter. So
`START` means "the beginning of an excerpt", which is what generation
"from nothing" starts from. Chorale windows start on a 16th-note step
(a multiple of 4 tokens), so the first token after `START` is always a
soprano. Validation uses the non-overlapping windows of each piece (every
token is a target exactly once at any window length), so negative
log-likelihoods at lengths L and 2L are averages over the same tokens.

Augmentation (training only), as in the paper's section 5.2. Performances:
each piece is time-stretched once per factor in 0.95, 0.975, 1, 1.025, 1.05
(`music.time_stretch`, cached on disk), and every example draws one stretch
and a transposition in -3..3 semitones (applied in the pipeline to the
note ids; an example whose notes would leave 0..127 is left untransposed).
Chorales (`train.py --transpose 1`): each chorale is transposed once by
every shift in -3..3 (`transposed_chorales`) and every example draws one.

Reference:
    Huang et al. 2018, "Music Transformer: Generating Music with Long-Term
    Structure", sections 4 (JSB Chorales) and 5 (performances, augmentation).
    Boulanger-Lewandowski et al. 2012 (JSB split); Wang et al. 2020 (POP909).
"""

import glob
import hashlib
import os
import time
import zlib

import numpy as np

from keras_attn.models import MUSIC_SUPPRESSED_TOKEN_IDS
from keras_attn.preprocessing import music
from keras_attn.preprocessing.jsb_chorales import transpose_chorale_tokens

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
SHIPPED_DATA_DIR = os.path.join(HERE, "data")
SHIPPED_MIDI_DIR = os.path.join(SHIPPED_DATA_DIR, "pop909")
DATA_ENV_VAR = "KERAS_ATTN_DATA"
POP909 = "pop909"  # --midi_dir pop909: the full POP909 through keras_attn.datasets.pop909
DEFAULT_CACHE_DIR = os.path.join(
    "runs", "music_cache"
)  # encoded MIDI events (train.py --cache_dir)
TASKS = ("jsb", "performance")
VALIDATION_BUCKETS = 10  # 1 file in 10 goes to validation


def vocabulary_size(task):
    """Number of event ids of a task's vocabulary."""
    return music.JSB_VOCABULARY_SIZE if task == "jsb" else music.VOCABULARY_SIZE


def step_size(task):
    """Window starts are multiples of this (4 = one chorale step)."""
    return music.JSB_NUM_VOICES if task == "jsb" else 1


def unused_pitch_ids(task, train_pieces):
    """The pitch ids no training piece holds, to leave out of sampling.

    A pitch Bach's four voices never sing (below MIDI 36 or above 81) gets,
    without transposition, only the probability an untrained output row
    starts with; sampled thousands of times it shows up as a stray note far
    below the bass or above the soprano. The chorales as they are decide
    (also for a model trained with `--transpose 1`, which has seen 33..84):
    samples keep to Bach's range. Performance models train on every piece
    transposed by -3..3 semitones (`training_dataset`), so no pitch is left
    out there.

    Args:
        task: "jsb" or "performance".
        train_pieces: the training token arrays (`load_jsb(..., "train")`).

    Returns:
        sorted tuple of int ids (`music.JSB_PITCH_OFFSET + pitch`); empty
        for performances.
    """
    if task != "jsb":
        return ()
    used = np.unique(np.concatenate(train_pieces)) if train_pieces else np.zeros((0,), np.int32)
    pitches = np.arange(music.JSB_PITCH_OFFSET, music.JSB_VOCABULARY_SIZE)
    return tuple(int(i) for i in np.setdiff1d(pitches, used))


def never_sampled_ids(task, train_pieces, all_pitches=False):
    """The ids that sampling, in `generate.py` and in the exported
    generator alike, never draws: padding and start
    (`MUSIC_SUPPRESSED_TOKEN_IDS`), and for JSB the pitches no training
    chorale uses (`unused_pitch_ids`) unless `all_pitches`.

    Args:
        task: "jsb" or "performance".
        train_pieces: the training token arrays (`load_jsb(..., "train")`;
            not read for performances or with `all_pitches`).
        all_pitches: True = let sampling draw every pitch.

    Returns:
        tuple of int ids, padding and start first.
    """
    unused = () if all_pitches else unused_pitch_ids(task, train_pieces)
    return tuple(MUSIC_SUPPRESSED_TOKEN_IDS) + unused


# ----------------------------------------------------------------- reading
def load_jsb(data_dir=None, split="train"):
    """The chorales of one split as token arrays, each ending with END.

    Args:
        data_dir: folder (or file) with `Jsb16thSeparated.json`, or an
            offline data folder laid out as the shared one (its
            `jsb_chorales/Jsb16thSeparated.json`, sha256-checked by
            `keras_attn.datasets.jsb_chorales`); defaults to the copy shipped
            in `examples/music/data` (the whole data set).
        split: "train" or "valid".

    Returns:
        list of np.int32 arrays (4 * steps + 1,).
    """
    if data_dir and os.path.isdir(os.path.join(data_dir, "jsb_chorales")):
        from keras_attn.datasets import jsb_chorales

        data_dir = jsb_chorales.fetch(data_dir=data_dir)
    return load_chorale_file(data_dir or SHIPPED_DATA_DIR, split)


VALIDATION_HALVES = ("choice", "report")


def validation_half(pieces, half):
    """One half of the validation pieces, to choose sampling settings on one
    and report figures on the other (in file order: "choice" is the first
    half, "report" the rest; 38 + 38 of the 76 JSB validation chorales).

    Args:
        pieces: the validation pieces, in the order the data file holds them.
        half: "choice" or "report".

    Returns:
        list: the pieces of that half, in order.
    """
    middle = len(pieces) // 2
    return list(pieces[:middle] if half == "choice" else pieces[middle:])


def load_chorale_file(path, key="valid"):
    """The chorales of `key` in a JSON file laid out as the data
    (`{"valid": [chorale: [step: [S, A, T, B]]]}`, -1 = rest), as token
    arrays ending with END, as `load_jsb` returns them."""
    chorales = music.load_jsb_chorales(path, key)
    return [
        np.append(music.chorale_to_tokens(c), music.JSB_END_ID).astype(np.int32) for c in chorales
    ]


def shared_data_dir():
    """The project's shared data folder (full data sets, not in the repository).

    Returns:
        `$KERAS_ATTN_DATA` if set, else `../shared/data` relative to the
        repository root (beside the checkout), normalized.
    """
    return os.path.normpath(
        os.environ.get(DATA_ENV_VAR) or os.path.join(REPO_ROOT, "..", "shared", "data")
    )


def default_midi_dir():
    """POP909 (`pop909/POP909` in `shared_data_dir()`) where it exists, else
    the six shipped songs."""
    pop909 = os.path.join(shared_data_dir(), "pop909", "POP909")
    return pop909 if os.path.isdir(pop909) else SHIPPED_MIDI_DIR


def _holds_pop909(folder):
    return bool(folder) and os.path.isdir(os.path.join(folder, "pop909", "POP909"))


def resolve_midi_dir(midi_dir=None, data_dir=None):
    """The folder of MIDI files a `--midi_dir` (and `--data_dir`) names.

    Args:
        midi_dir: a folder of .mid files; `"pop909"` (`POP909`) for all of
            POP909 through `keras_attn.datasets.pop909`: from the offline
            folder (`data_dir`, else the shared data folder, where it holds
            `pop909/POP909`), else the loader's cache
            (`~/.keras/datasets/keras_attn/pop909`), else downloaded once
            (909 files, 25 MB, each sha256-checked); None: POP909 in
            `data_dir` or the shared data folder where it is there, else the
            six shipped songs (`default_midi_dir`).
        data_dir: train.py's `--data_dir`, when it is an offline data
            folder laid out as the shared one.

    Returns:
        `(folder, source)`: the folder and a phrase saying where it came from.
    """
    if midi_dir == POP909:
        from keras_attn.datasets import pop909

        offline = next((d for d in (data_dir, shared_data_dir()) if _holds_pop909(d)), None)
        folder = pop909.fetch(data_dir=offline)
        where = (
            f"the offline folder {offline}"
            if offline
            else "the cache, downloaded if it lacked songs"
        )
        return folder, f"POP909 through keras_attn.datasets.pop909, from {where}"
    if midi_dir:
        return midi_dir, "--midi_dir" if midi_dir != os.environ.get("MIDI_DIR") else "$MIDI_DIR"
    if _holds_pop909(data_dir):
        return os.path.join(data_dir, "pop909", "POP909"), "POP909, found in --data_dir"
    folder = default_midi_dir()
    if folder == SHIPPED_MIDI_DIR:
        return folder, (
            "the songs shipped with the example: no pop909/POP909 in the shared data "
            f"folder {shared_data_dir()} (--midi_dir pop909 downloads all of POP909)"
        )
    return folder, "POP909, found in the shared data folder"


def find_midi_files(midi_dir):
    """Every .mid / .midi file under `midi_dir` (recursively), sorted."""
    if not os.path.isdir(midi_dir):
        raise ValueError(
            f"Expected a folder of MIDI files. Received: --midi_dir={midi_dir!r}, "
            "which is not a folder."
        )
    files = [
        path
        for path in glob.glob(os.path.join(midi_dir, "**", "*"), recursive=True)
        if path.lower().endswith((".mid", ".midi")) and os.path.isfile(path)
    ]
    if not files:
        raise ValueError(f"Expected .mid or .midi files under {midi_dir!r}. Received: none.")
    return sorted(files)


def split_files(files):
    """Deterministic train/validation split by a hash of each file name.

    A file goes to validation when crc32(basename) % 10 == 0; if that leaves
    no validation file (tiny folders), the last file is used for validation.

    Returns:
        (train_files, validation_files).
    """
    validation = [
        f for f in files if zlib.crc32(os.path.basename(f).encode()) % VALIDATION_BUCKETS == 0
    ]
    if not validation:
        validation = files[-1:]
    train = [f for f in files if f not in set(validation)]
    if not train:
        raise ValueError(
            f"Need at least two MIDI files (one to train on, one to validate). "
            f"Received: {len(files)}."
        )
    return train, validation


def _encode_file(path):
    try:
        return music.midi_to_events(path)
    except ValueError as error:  # a corrupt or empty file in a user's folder
        print(f"Skipping {path}: {error}")
        return None


def load_performances(midi_dir, cache_dir=None, stretches=music.AUGMENTATION_STRETCHES):
    """Encodes a folder of MIDI files once (cached), split and time-stretched.

    Args:
        midi_dir: folder of .mid files.
        cache_dir: where to keep `events_<hash>.npz` (the hash covers the
            file list and stretches); None = no cache.
        stretches: time-stretch factors of the training pieces.

    Returns:
        dict with `train`: list (one per piece) of lists (one per stretch)
        of np.int32 event arrays ending with END; `valid`: list of event
        arrays (no augmentation) ending with END; `train_files`,
        `valid_files`; `stretches`.
    """
    files = find_midi_files(midi_dir)
    train_files, valid_files = split_files(files)
    key = hashlib.sha1(
        repr(
            (
                sorted(os.path.relpath(f, midi_dir) for f in files),
                tuple(stretches),
                [os.path.getsize(f) for f in files],
            )
        ).encode()
    ).hexdigest()[:12]
    cache = os.path.join(cache_dir, f"events_{key}.npz") if cache_dir else None
    if cache and os.path.exists(cache):
        stored = np.load(cache, allow_pickle=False)
        flat, lengths = stored["events"], stored["lengths"]
        arrays = np.split(flat, np.cumsum(lengths)[:-1])
        counts = stored["counts"]  # arrays per file (0 = skipped)
    else:
        start = time.time()
        arrays, counts = [], []
        for index, path in enumerate(files):
            events = _encode_file(path)
            if events is None:
                counts.append(0)
                continue
            if path in valid_files:
                variants = [events]
            else:
                variants = [
                    events if s == 1.0 else music.time_stretch(events, s) for s in stretches
                ]
            arrays.extend(np.append(v, music.END_ID).astype(np.int32) for v in variants)
            counts.append(len(variants))
            if (index + 1) % 100 == 0:
                print(f"  encoded {index + 1}/{len(files)} files ({time.time() - start:.0f} s)")
        print(f"Encoded {len(files)} MIDI files in {time.time() - start:.1f} s")
        if cache:
            os.makedirs(cache_dir, exist_ok=True)
            np.savez(
                cache,
                events=np.concatenate(arrays).astype(np.int16),
                lengths=np.array([len(a) for a in arrays]),
                counts=np.array(counts),
            )
    result = {
        "train": [],
        "valid": [],
        "train_files": [],
        "valid_files": [],
        "stretches": tuple(stretches),
    }
    position = 0
    for path, count in zip(files, counts):
        group = [np.asarray(a, np.int32) for a in arrays[position : position + count]]
        position += count
        if not count:
            continue
        if path in valid_files:
            result["valid"].append(group[0])
            result["valid_files"].append(path)
        else:
            result["train"].append(group)
            result["train_files"].append(path)
    if not result["train"] or not result["valid"]:
        raise ValueError(
            f"Need readable MIDI files for both training and validation under {midi_dir!r}."
        )
    return result


# -------------------------------------------------------------- pipelines
def training_dataset(
    pieces, sequence_length, batch_size, seed, step=1, transpose=False, skip_batches=0
):
    """Endless batches of random windows, as (inputs, targets) int32 (B, L).

    Args:
        pieces: list of token arrays (each ending with END), or a list of
            lists of arrays (time-stretched variants of each piece: one is
            drawn per example).
        sequence_length: L.
        batch_size: B.
        seed: int; the stream of windows is a function of it.
        step: window starts are multiples of `step`.
        transpose: draw a transposition in -3..3 semitones per example
            (performance events only; chorales: `transposed_chorales`).
        skip_batches: start the stream after this many batches (a resumed
            run: the number of steps already trained), without computing
            them.

    Returns:
        `tf.data.Dataset` of `(inputs, targets)`, inputs `[START, w_0 ..
        w_{L-2}]`, targets `[w_0 .. w_{L-1}]`, 0-padded.
    """
    import tensorflow as tf

    groups = [p if isinstance(p, (list, tuple)) else [p] for p in pieces]
    num_variants = len(groups[0])
    if any(len(g) != num_variants for g in groups):
        raise ValueError("Every piece needs the same number of variants.")
    flat = [a for g in groups for a in g]
    values = tf.constant(np.concatenate(flat).astype(np.int32))
    starts = tf.constant(np.cumsum([0] + [len(a) for a in flat])[:-1].astype(np.int64))
    lengths = tf.constant(np.array([len(a) for a in flat], np.int64))
    num_pieces = len(groups)
    semitones = tf.constant(music.AUGMENTATION_SEMITONES, tf.int32)

    def example(random):
        # `%` on tensors is floor-mod: non-negative for any int64 draw.
        row = (random[0] % num_pieces) * num_variants + random[1] % num_variants
        length = lengths[row]
        last_start = tf.maximum(length - sequence_length, 0) // step
        offset = (random[2] % (last_start + 1)) * step
        size = tf.minimum(tf.cast(sequence_length, tf.int64), length - offset)
        window = values[starts[row] + offset : starts[row] + offset + size]
        if transpose:
            window = transpose_events(
                window, semitones[random[3] % len(music.AUGMENTATION_SEMITONES)]
            )
        window = tf.pad(window, [[0, sequence_length - tf.shape(window)[0]]])
        window = tf.ensure_shape(window, (sequence_length,))
        inputs = tf.concat([[music.START_ID], window[:-1]], axis=0)
        return inputs, window

    return (
        tf.data.Dataset.random(seed=seed)
        # Four draws per example: skipping them skips the examples exactly.
        .skip(4 * batch_size * skip_batches)
        .batch(4)
        .map(example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .batch(batch_size, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def transposed_chorales(pieces, semitones=music.AUGMENTATION_SEMITONES):
    """Each chorale in every transposition of `semitones`, as variants for
    `training_dataset` (one is drawn per example, as a performance's time
    stretches are): the paper's transposition, applied once to the token
    arrays (`transpose_chorale_tokens`) rather than in the pipeline. A
    shift that would push a pitch outside 0..127 keeps the chorale as it is
    (never for JSB: its pitches are 36..81).

    Args:
        pieces: list of chorale token arrays (`load_jsb`).
        semitones: the shifts, one variant each.

    Returns:
        list (one per chorale) of lists (one per shift) of np.int32 arrays.
    """
    variants = []
    for piece in pieces:
        pitches = piece[piece >= music.JSB_PITCH_OFFSET] - music.JSB_PITCH_OFFSET
        low, high = (int(pitches.min()), int(pitches.max())) if pitches.size else (0, 0)
        variants.append(
            [
                transpose_chorale_tokens(piece, s) if 0 <= low + s and high + s < 128 else piece
                for s in semitones
            ]
        )
    return variants


def transpose_events(events, semitones):
    """Shifts the note-on/note-off ids of an int32 event tensor by
    `semitones`; returns `events` unchanged if a note would leave 0..127
    (the paper's transpositions, inside a tf.data map)."""
    import tensorflow as tf

    is_note = (events >= music.NOTE_ON_OFFSET) & (events < music.TIME_SHIFT_OFFSET)
    pitch = (events - music.NOTE_ON_OFFSET) % music.NUM_PITCHES + semitones
    fits = tf.reduce_all(~is_note | ((pitch >= 0) & (pitch < music.NUM_PITCHES)))
    shift = tf.where(fits, semitones, 0)
    return tf.where(is_note, events + shift, events)


def evaluation_windows(pieces, window_length, step=1):
    """The non-overlapping windows of every piece, as NumPy (inputs, targets).

    Window k of a piece holds its tokens k*W .. k*W + W - 1 (the last one
    0-padded), with inputs `[START, ...]` as in training; every token of
    every piece is a target exactly once. With `window_length=None` each
    piece is one window (as long as the longest piece).

    Returns:
        (inputs, targets) int32 arrays (N, W).
    """
    if window_length is None:
        window_length = max(len(p) for p in pieces)
        window_length = -(-window_length // step) * step
    inputs, targets = [], []
    for piece in pieces:
        for begin in range(0, len(piece), window_length):
            window = np.zeros(window_length, np.int32)
            chunk = piece[begin : begin + window_length]
            window[: len(chunk)] = chunk
            shifted = np.zeros(window_length, np.int32)
            shifted[0] = music.START_ID
            shifted[1 : len(chunk)] = chunk[:-1]
            inputs.append(shifted)
            targets.append(window)
    return np.stack(inputs), np.stack(targets)


def validation_dataset(pieces, window_length, batch_size, step=1):
    """`evaluation_windows` as a batched tf.data.Dataset."""
    import tensorflow as tf

    inputs, targets = evaluation_windows(pieces, window_length, step)
    return tf.data.Dataset.from_tensor_slices((inputs, targets)).batch(batch_size)
