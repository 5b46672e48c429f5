"""Piano rolls of generated music: a sample alone, or above the piece its
primer came from, on one time axis."""

import numpy as np

from keras_attn.preprocessing import music


def piano_roll(midi, fs):
    """(128, frames) array: each note's velocity over its frames, summed over
    tracks, at `fs` frames per second (like pretty_midi's `get_piano_roll`)."""
    in_seconds = midi.to("second")
    roll = np.zeros((music.NUM_PITCHES, int(np.ceil(in_seconds.end() * fs)) + 1))
    for track in in_seconds.tracks:
        notes = track.notes.numpy()
        starts = (notes["time"] * fs).astype(int)
        ends = ((notes["time"] + notes["duration"]) * fs).astype(int)
        for pitch, start, end, velocity in zip(notes["pitch"], starts, ends, notes["velocity"]):
            roll[pitch, start:end] += velocity
    return roll


def plot_piano_roll(midi, path, title, primer_end=0.0, truth=None, fs=50, dpi=110):
    """Writes the piano roll of `midi` to the PNG `path`, the primer shaded.

    Args:
        midi: a `symusic.Score`, the sample (primer included).
        path: the .png file to write.
        title: the title above the roll.
        primer_end: seconds of the primer at the start (0: none shaded).
        truth: optional `symusic.Score`, the piece the primer came from: drawn
            below the sample on the same time and pitch axes, cut where the
            sample ends (its real continuation).
        fs: frames per second of the rolls.
        dpi: resolution of the PNG.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rolls = [piano_roll(midi, fs)]
    if truth is not None:
        rolls.append(piano_roll(truth, fs)[:, : rolls[0].shape[1]])
    pitches = np.flatnonzero(sum(roll.sum(axis=1) for roll in rolls))
    low, high = (pitches.min(), pitches.max()) if pitches.size else (0, 127)
    seconds = rolls[0].shape[1] / fs
    fig, axes = plt.subplots(
        len(rolls), 1, figsize=(12, 1 + 2.5 * len(rolls)), sharex=True, squeeze=False
    )
    labels = [title, "the primer's piece as written (its real continuation)"]
    for axis, roll, label in zip(axes[:, 0], rolls, labels):
        axis.imshow(
            roll[low : high + 1] > 0,
            aspect="auto",
            origin="lower",
            cmap="Greys",
            extent=(0, roll.shape[1] / fs, low - 0.5, high + 0.5),
            interpolation="nearest",
        )
        axis.set_xlim(0, seconds)
        if primer_end > 0:
            axis.axvspan(0, primer_end, color="tab:blue", alpha=0.15, label="primer")
            # Beside the roll, not over its top-right notes.
            axis.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
        axis.set_ylabel("MIDI pitch")
        axis.set_title(label, fontsize=10)
    axes[-1, 0].set_xlabel("time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
