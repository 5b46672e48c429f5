"""Sample music from a trained Music Transformer: from nothing, or continuing a primer.

    # from nothing (the start token), 4 samples of twice the training length:
    python examples/music/generate.py --run_dir runs/music_performance_relative
    # continue the first 256 events of a MIDI file:
    python examples/music/generate.py --run_dir runs/music_performance_relative \\
        --primer examples/music/data/pop909/005.mid --primer_length 256
    # continue the start of validation pieces (both tasks); of one half of them
    # (validation:choice to choose settings on, validation:report to report on):
    python examples/music/generate.py --run_dir runs/music_jsb_relative --primer validation
    python examples/music/generate.py --run_dir runs/music_jsb_relative --primer validation:report
    # continue the start of the chorales of any JSON file laid out as the data:
    python examples/music/generate.py --run_dir runs/music_jsb_relative --primer held_out.json

The two generation tasks of the paper (section 5): unconditioned, and
continuation of a primer. Sampling runs through the generation engine
(`keras_attn.generation.sample`, cached, batched), with temperature, top-k
and top-p (by default the task's recommended settings, those of the exported
generator: `RECOMMENDED_SAMPLING` in keras_attn.export.music_generator), under
tf.function (XLA by default). JSB samples are drawn in windows of the training
length by default (--context, context_window.py): past it, the samples drift
into held chords. For every sample it writes a .mid file and a piano-roll PNG
(primer shaded; below it, the piece the primer came from as written) to
<run_dir>/samples/, prints the samples' note statistics beside the validation
data's (note_statistics.py), and reports the sampling speed (new events per
second for the batch) and the cost of one cached step at several positions
(flat: every step attends over the fixed-size cache).

JSB: pitches no training chorale uses (below MIDI 36 or above 81) are never
sampled, as in the exported SavedModel; --all_pitches samples them too.

Performances: a model can sample a NOTE_ON and never its NOTE_OFF, and the
note then sounds to the end of the sample. The .mid files cut such notes at
--max_note_duration seconds (5 by default, as Magenta's Performance RNN
does; 0 keeps them), and the statistics count them.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import quiet  # noqa: E402,F401  (first: TensorFlow's start-up logs only with --verbose)

# isort: split

import context_window  # noqa: E402
import keras  # noqa: E402
import music_data  # noqa: E402
import note_statistics  # noqa: E402
import numpy as np  # noqa: E402
import piano_roll  # noqa: E402

from keras_attn.generation import CachedDecoder, sample  # noqa: E402
from keras_attn.models import MUSIC_SUPPRESSED_TOKEN_IDS  # noqa: E402
from keras_attn.preprocessing import music  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--run_dir", required=True, help="a train.py output folder (config.json, model.keras)"
    )
    parser.add_argument(
        "--primer",
        default="none",
        help="'none' (default: start token only); 'validation' (start of validation "
        "pieces), 'validation:choice' or 'validation:report' (of their first or second "
        "half); a .mid file (performance task) or a .json chorale file laid out as the "
        "data (jsb task; --primer_key)",
    )
    parser.add_argument(
        "--primer_key",
        default="valid",
        help="the key of a .json --primer whose chorales are the primers (default 'valid')",
    )
    parser.add_argument(
        "--primer_length",
        type=int,
        default=None,
        help="events taken from the primer (default: half the training length; "
        "JSB: a multiple of 4, one 16th of the four voices)",
    )
    parser.add_argument(
        "--length",
        type=int,
        default=None,
        help="total events per sample, primer included (default: 2 x training length)",
    )
    parser.add_argument(
        "--num_samples", type=int, default=4, help="samples, sampled as one batch (default 4)"
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="> 0; below 1 sharpens the model's distribution, above 1 flattens it "
        "(default: the task's recommended setting, RECOMMENDED_SAMPLING in "
        "keras_attn.export.music_generator: 1.0 for chorales, 0.9 for performances)",
    )
    parser.add_argument(
        "--top_k",
        type=int,
        default=None,
        help="sample among the k most likely events, 0 = all (default: the task's "
        "recommended setting: 5 for chorales, 40 for performances)",
    )
    parser.add_argument(
        "--top_p",
        type=float,
        default=None,
        help="sample among the most likely events whose probabilities sum to p, in (0, 1] "
        "(default: the task's recommended setting: 1 = all for chorales and for performances)",
    )
    parser.add_argument(
        "--context",
        type=int,
        default=None,
        help="condition every sampled event on at most this many events, START included: "
        "past it, each row is primed again with its last context/2 events and continued "
        "(context_window.py); 0 = the whole sample (default: the training length L for "
        "chorales, whose samples drift into held chords past L; 0 for performances, as "
        "measured in the README)",
    )
    parser.add_argument(
        "--all_pitches",
        action="store_true",
        help="JSB: also sample the pitches no training chorale uses (left out by "
        "default: the model never learned them)",
    )
    parser.add_argument("--seed", type=int, default=1, help="same seed, same samples (default 1)")
    parser.add_argument(
        "--verbose", action="store_true", help="show TensorFlow's start-up logs (hidden by default)"
    )
    parser.add_argument(
        "--jit_compile",
        type=int,
        default=1,
        choices=(0, 1),
        help="1 = compile the sampling loop with XLA (default 1)",
    )
    parser.add_argument(
        "--name",
        default=None,
        help="file name prefix (default: from --primer); files of the same name in "
        "<run_dir>/samples/ are replaced",
    )
    parser.add_argument(
        "--max_note_duration",
        type=float,
        default=None,
        help=f"performance task: cut notes the model leaves sounding longer than this "
        f"many seconds in the written .mid files (default {note_statistics.LONG_NOTE_SECONDS:g}; "
        "0 = keep them)",
    )
    parser.add_argument(
        "--speed",
        type=int,
        default=1,
        choices=(0, 1),
        help="1 = time the sampling loop (default): two more passes of the batch to "
        "--length without stopping at END, the first to compile; 0 = skip them",
    )
    parser.add_argument(
        "--timing_steps",
        type=int,
        default=50,
        help="repetitions of one cached step per position for the flatness check "
        "(default 50; 0 = skip)",
    )
    args = parser.parse_args(argv)
    for flag in ("length", "primer_length", "num_samples"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            parser.error(f"--{flag} must be > 0, received {value}")
    if args.temperature is not None and args.temperature <= 0:
        parser.error(f"--temperature must be > 0, received {args.temperature}")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        parser.error(f"--top_p must be in (0, 1], received {args.top_p}")
    if args.top_k is not None and args.top_k < 0:
        parser.error(f"--top_k must be >= 0 (0 = sample among all events), received {args.top_k}")
    if args.context is not None and args.context < 0:
        parser.error(f"--context must be >= 0 (0 = the whole sample), received {args.context}")
    cut = args.max_note_duration
    if cut:  # 0 keeps every note; any other value the library's own check, before sampling
        try:
            music.events_to_notes(np.zeros((0,), "int32"), max_note_duration=cut)
        except ValueError as error:
            parser.error(f"--max_note_duration (0 keeps every note): {error}")
    config_path = os.path.join(args.run_dir, "config.json")
    if not os.path.isfile(config_path):
        parser.error(
            f"--run_dir {args.run_dir!r} has no config.json: pass the --output_dir of a "
            "finished examples/music/train.py run"
        )
    try:
        with open(config_path) as f:
            args.config = json.load(f)
        args.task = args.config["task"]
        args.config["sequence_length"]  # read below
    except (ValueError, KeyError, TypeError) as error:  # JSONDecodeError is a ValueError
        parser.error(
            f"{config_path} is not the config.json of a finished examples/music/train.py "
            f"run ({type(error).__name__}: {error}); train again into --run_dir"
        )
    if args.task not in music_data.TASKS:
        parser.error(
            f"{config_path}: unknown task {args.task!r}, expected one of {music_data.TASKS}"
        )
    if args.task == "jsb" and cut is not None:
        parser.error(
            "--max_note_duration applies to performance runs; chorales on a 16th-note grid "
            "have no notes left sounding: leave it out"
        )
    args.max_note_duration = (
        None
        if args.task == "jsb"
        else (note_statistics.LONG_NOTE_SECONDS if cut is None else cut or None)
    )
    args.length = args.length if args.length is not None else 2 * args.config["sequence_length"]
    _sampling_defaults(args)
    if args.primer == "none" and args.primer_length is not None:
        parser.error(
            "--primer_length takes events from a primer: pass --primer validation or a "
            ".mid file with it, or leave it out"
        )
    halves = tuple(f"validation:{half}" for half in music_data.VALIDATION_HALVES)
    if args.primer not in ("none", "validation", *halves):
        kind = os.path.splitext(args.primer.lower())[1]
        if kind not in (".mid", ".midi", ".json"):
            parser.error(
                f"--primer must be 'none', 'validation', {' or '.join(map(repr, halves))}, "
                f"a .mid or a .json file, received {args.primer!r}"
            )
        if (kind == ".json") != (args.task == "jsb"):
            parser.error(
                f"--primer {args.primer!r}: a jsb run takes .json chorale files, a "
                "performance run .mid files"
            )
        if not os.path.isfile(args.primer):
            parser.error(f"--primer {args.primer!r}: no such file")
    step = music_data.step_size(args.task)
    if args.primer_length is not None and args.primer_length % step:
        parser.error(
            f"--primer_length must be a multiple of {step} for a {args.task} run (whole "
            f"time steps of the {step} voices), received {args.primer_length}"
        )
    args.primer_length = (
        args.primer_length
        if args.primer_length is not None
        else args.config["sequence_length"] // 2
    )
    args.primer_length -= args.primer_length % step
    if 0 < args.context < args.length:
        # The first window holds the primer and START; the later ones context // 2
        # events (and up to a time step more) and START, with room to sample.
        primed = 0 if args.primer == "none" else args.primer_length
        shortest = max(2 * step + 4, primed + 2)
        if args.context < shortest:
            parser.error(
                f"--context must be at least {shortest} here (the primer, START and a time "
                f"step of {step} events to sample), or 0 for the whole sample; received "
                f"{args.context}"
            )
    if args.name is None:
        args.name = os.path.splitext(os.path.basename(args.primer))[0].replace(":", "_")
    return args


def _sampling_defaults(args):
    """Fills the sampling flags left out with the task's recommended settings
    (`RECOMMENDED_SAMPLING`, the exported generator's; JSB: --context L);
    --top_k 0 and --top_p 1 mean no filter, as in the SavedModel."""
    from keras_attn.export.music_generator import RECOMMENDED_SAMPLING

    recommended = RECOMMENDED_SAMPLING[args.task]
    for flag in ("temperature", "top_k", "top_p"):
        if getattr(args, flag) is None:
            setattr(args, flag, recommended[flag])
    args.top_k = args.top_k or None
    args.top_p = None if args.top_p == 1 else args.top_p
    if args.context is None:
        args.context = args.config["sequence_length"] if args.task == "jsb" else 0


def validation_pieces(args):
    """The validation pieces of the run's data, as token arrays ending with END."""
    if args.task == "jsb":
        return music_data.load_jsb(args.config.get("data_dir"), "valid")
    return music_data.load_performances(
        # None in config.json: train.py's defaults; "pop909": the loader's folder (cached).
        music_data.resolve_midi_dir(args.config.get("midi_dir"), args.config.get("data_dir"))[0],
        args.config.get("cache_dir") or music_data.DEFAULT_CACHE_DIR,
    )["valid"]


def primer_pieces(args, pieces):
    """The pieces the primers start and the statistics' reference windows
    come from: the validation `pieces`, one half of them, or the chorales of
    a .json --primer (for 'none' and .mid primers: all validation pieces)."""
    if args.primer.startswith("validation:"):
        return music_data.validation_half(pieces, args.primer.split(":")[1])
    if args.primer.lower().endswith(".json"):
        return music_data.load_chorale_file(args.primer, args.primer_key)
    return pieces


def suppressed_ids(args):
    """Ids never sampled: padding and start, and for JSB (unless
    --all_pitches) the pitches the training chorales never use."""
    train = []
    if args.task == "jsb" and not args.all_pitches:
        train = music_data.load_jsb(args.config.get("data_dir"), "train")
    ids = music_data.never_sampled_ids(args.task, train, args.all_pitches)
    unused = np.array(ids[len(MUSIC_SUPPRESSED_TOKEN_IDS) :], np.int64)
    if len(unused):
        sung = np.setdiff1d(np.arange(music.NUM_PITCHES), unused - music.JSB_PITCH_OFFSET)
        print(
            f"Never sampled: the {len(unused)} pitches no training chorale uses (the chorales "
            f"span MIDI {sung.min()}..{sung.max()}; --all_pitches samples them too)"
        )
    return ids


def primer_sources(args, pieces):
    """The whole event array each sample's primer is cut from: sample i's is
    `pieces[i % len(pieces)]` (`primer_pieces`), or the events of the .mid
    --primer; None for --primer none."""
    if args.primer == "none":
        return None
    if args.primer.lower().endswith((".mid", ".midi")):
        return [music.midi_to_events(args.primer)] * args.num_samples
    return [pieces[i % len(pieces)] for i in range(args.num_samples)]


def make_primers(args, sources):
    """(B, P) right-padded int32 primers, each starting with START and then
    the first --primer_length events of its `primer_sources` row."""
    start = np.array([music.START_ID], np.int32)
    if sources is None:
        return np.tile(start, (args.num_samples, 1))
    rows = [source[: args.primer_length] for source in sources]
    width = 1 + max(len(r) for r in rows)
    primers = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        row = row[row != music.END_ID]
        primers[i, : 1 + len(row)] = np.concatenate([start, row])
    return primers


def to_midi(task, tokens, max_note_duration=None):
    """A `symusic.Score` for one generated row (specials dropped); performance
    notes cut at `max_note_duration` seconds (None: as sampled)."""
    if task == "jsb":
        body = note_statistics.chorale_body(tokens)
        if not body.size:
            import symusic

            return symusic.Score()
        return music.chorale_to_midi(music.tokens_to_chorale(body))
    return music.events_to_midi(tokens, max_note_duration=max_note_duration)


def primer_seconds(task, primer_row):
    """Duration of the primer, to shade it in the piano roll."""
    if task == "jsb":
        return (
            len(note_statistics.chorale_body(primer_row)) // music.JSB_NUM_VOICES * 0.125
        )  # 16ths at 120 bpm
    return note_statistics.performance_seconds(primer_row)


def compare_with_validation(args, tokens, lengths, pieces):
    """Prints the sampled events' note statistics beside those of the
    validation `pieces` (`primer_pieces`; windows as long as the samples);
    returns both for the report."""
    sampled = [row[length:] for row, length in zip(tokens, lengths)]
    new_events = int(args.length - lengths.max())
    step = music_data.step_size(args.task)
    windows = note_statistics.validation_windows(pieces, new_events, step)
    cut = args.max_note_duration  # None for chorales
    both = {
        "samples": note_statistics.music_statistics(args.task, sampled, max_note_duration=cut),
        "validation": note_statistics.music_statistics(args.task, windows),
    }
    if both["samples"] is None or both["validation"] is None:
        print(
            f"No note statistics: the {'samples' if both['samples'] is None else 'validation pieces'} "
            "hold no note."
        )
        return both
    print(
        f"Sampled events against the validation data ({len(sampled)} samples, "
        f"{len(windows)} validation windows of up to {new_events - new_events % step} events):"
    )
    print(f"  {'':36s}{'samples':>10s}{'validation':>12s}")
    for key, (label, unit, scale) in note_statistics.STATISTICS[args.task].items():
        name = f"{label} ({unit})" if unit and unit != "%" else label
        suffix = " %" if unit == "%" else ""
        values = [f"{both[side][key] * scale:.2f}{suffix}" for side in ("samples", "validation")]
        print(f"  {name:36s}{values[0]:>10s}{values[1]:>12s}")
    if cut:
        print(
            f"  (the samples' note duration and notes sounding at once after cutting notes at "
            f"{cut:g} s, as in the .mid files;\n   notes longer than {note_statistics.LONG_NOTE_SECONDS:g} s counted as sampled)"
        )
    return both


def step_timings(model, batch_size, max_length, positions, repeats):
    """Seconds per cached decoding step of the batch at several positions."""
    import tensorflow as tf

    decoder = CachedDecoder(model)
    state = decoder.initial_state(batch_size, max_length)

    @tf.function(jit_compile=True)
    def step(tokens, index, state):
        return decoder(tokens, index, state)

    tokens = tf.fill((batch_size, 1), music.START_ID)
    indices = {p: tf.constant(p, tf.int32) for p in positions}
    for index in indices.values():
        step(tokens, index, state)  # compile / warm up
    # Rounds interleave the positions, and the fastest round counts: other
    # processes on the machine slow some rounds down, never speed one up.
    rounds = 5
    best = {p: float("inf") for p in positions}
    for _ in range(rounds):
        for position, index in indices.items():
            start = time.perf_counter()
            for _ in range(max(1, repeats // rounds)):
                logits, _ = step(tokens, index, state)
            np.asarray(logits)
            best[position] = min(
                best[position], (time.perf_counter() - start) / max(1, repeats // rounds)
            )
    return best


def measure_speed(args, model, primers, lengths, kwargs):
    """Times the sampling loop without stopping at END (every row runs to
    --length) on its second call, so compilation is out; prints the Speed
    line and returns its figures for the report."""
    import tensorflow as tf

    def run_to_length(prompt, seed):
        return sample(model, prompt, args.length, seed=seed, end_token_id=None, **kwargs)

    print(
        "Timing the loop: two more passes of the batch to --length, the first to compile "
        "(--speed 0 skips them)...",
        flush=True,
    )
    timed = tf.function(run_to_length, jit_compile=bool(args.jit_compile))
    np.asarray(timed(tf.constant(primers), tf.constant(args.seed)))
    start = time.perf_counter()
    np.asarray(timed(tf.constant(primers), tf.constant(args.seed + 1)))
    seconds = time.perf_counter() - start
    new_events = int(sum(args.length - lengths))
    print(
        f"Speed: {new_events} new events ({len(primers)} rows x up to {args.length}) in {seconds:.2f} s: "
        f"{new_events / seconds:.0f} events/s for the batch, {seconds / (args.length - lengths.min()) * 1000:.2f} "
        "ms per step"
    )
    return {"seconds": seconds, "events_per_second": new_events / seconds}


def main(argv=None):
    args = parse_args(argv)
    import tensorflow as tf

    model = keras.saving.load_model(os.path.join(args.run_dir, "model.keras"), compile=False)
    # The primers, and the reference of the statistics.
    pieces = primer_pieces(args, validation_pieces(args))
    if not pieces:
        raise ValueError(f"--primer {args.primer}: no chorale to prime from; pass another")
    sources = primer_sources(args, pieces)
    primers = make_primers(args, sources)
    if primers.shape[1] >= args.length:
        raise ValueError(
            f"--length ({args.length}) must exceed the primer ({primers.shape[1] - 1} "
            "events and the start token): pass a larger --length or a shorter "
            "--primer_length."
        )
    lengths = (primers != 0).sum(axis=1)
    suppressed = suppressed_ids(args)
    kwargs = dict(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        suppressed_token_ids=suppressed,
    )

    windowed = 0 < args.context < args.length
    window = args.context if windowed else args.length

    def generate(prompt, seed):
        return sample(model, prompt, window, seed=seed, end_token_id=music.END_ID, **kwargs)

    compiled = tf.function(generate, jit_compile=bool(args.jit_compile))
    print(
        f"Sampling {len(primers)} x {args.length} events: up to {args.length - lengths.min()} steps in "
        + (
            f"compiled loops over windows of {window} events (--context)"
            if windowed
            else "one compiled loop"
        )
        + f", which show no progress until they end (each step attends over all {window} cache "
        "positions)...",
        flush=True,
    )
    start = time.perf_counter()
    if windowed:
        tokens = context_window.sample_in_windows(
            lambda prompt, seed: compiled(tf.constant(prompt), tf.constant(seed)),
            primers,
            args.length,
            window,
            music_data.step_size(args.task),
            args.seed,
        )
    else:
        tokens = np.asarray(compiled(tf.constant(primers), tf.constant(args.seed)))
    print(
        f"Sampled {len(primers)} x {args.length} events in {time.perf_counter() - start:.1f} s "
        "(tracing and compilation included)"
    )

    speed = measure_speed(args, model, primers, lengths, kwargs) if args.speed else {}

    out_dir = os.path.join(args.run_dir, "samples")
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for i, row in enumerate(tokens):
        midi = to_midi(args.task, row, args.max_note_duration)
        base = os.path.join(out_dir, f"{args.name}_{i}")
        midi.dump_midi(base + ".mid")
        ended = bool((row[lengths[i] :] == music.END_ID).any())
        title = (
            f"{args.task}, {args.config['attention']} attention, {args.name} sample {i}: "
            f"{lengths[i] - 1} primer + {len(row) - lengths[i]} sampled events"
            + (" (ended with END)" if ended else "")
        )
        # Below the sample, the piece its primer came from, as written.
        truth = None if sources is None else to_midi(args.task, sources[i], args.max_note_duration)
        primer_end = primer_seconds(args.task, primers[i])
        piano_roll.plot_piano_roll(midi, base + ".png", title, primer_end, truth)
        written.append(base)
    print(f"Wrote {len(written)} .mid and .png files to {out_dir}")

    report = {
        "primer": args.primer,
        "num_samples": len(primers),
        "length": args.length,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "context": args.context,
        "max_note_duration": args.max_note_duration,
        "suppressed_token_ids": list(suppressed),
        **speed,
    }
    if args.timing_steps:
        positions = sorted({1, args.length // 4, args.length // 2, args.length - 1})
        timings = step_timings(model, len(primers), args.length, positions, args.timing_steps)
        print(
            "One cached step for the batch at position: "
            + ", ".join(f"{p}: {t * 1000:.2f} ms" for p, t in timings.items())
        )
        report["step_ms_by_position"] = {str(p): t * 1000 for p, t in timings.items()}
    report["statistics"] = compare_with_validation(args, tokens, lengths, pieces)
    with open(os.path.join(out_dir, f"{args.name}_report.json"), "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    quiet.run(main)
