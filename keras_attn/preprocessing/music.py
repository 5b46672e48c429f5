"""Music data for the Music Transformer: MIDI <-> performance events, JSB Chorales.

Two representations, each with its own small vocabulary:

* **Performance events** (Oore et al. 2018, used by Huang et al. 2018 for the
  Piano-e-Competition): a MIDI performance becomes a stream of `NOTE_ON(pitch)`,
  `NOTE_OFF(pitch)`, `TIME_SHIFT(10 ms .. 1 s)` and `VELOCITY(bin)` events.
  Ids (`VOCABULARY_SIZE` = 391, size embeddings with it)::

      0          PAD_ID
      1          START_ID
      2          END_ID
      3   .. 130 NOTE_ON   pitch 0..127      (NOTE_ON_OFFSET + pitch)
      131 .. 258 NOTE_OFF  pitch 0..127      (NOTE_OFF_OFFSET + pitch)
      259 .. 358 TIME_SHIFT 10 ms .. 1000 ms (TIME_SHIFT_OFFSET + steps - 1)
      359 .. 390 VELOCITY  bin 0..31         (VELOCITY_OFFSET + bin)

  Times are quantized to 10 ms steps (rounded to the nearest step); a gap
  longer than 1 s is several `TIME_SHIFT`s. At one instant note-offs come
  before note-ons, each group by ascending pitch; a `VELOCITY` event precedes
  a note-on only when its bin differs from the current one. Velocities 1..127
  fall in 32 bins of width 4 (`bin = (velocity - 1) // 4`) and decode to the
  bin's lowest velocity `4 * bin + 1` - the same quantization as Magenta's
  performance encoding.

* **JSB Chorales** (Boulanger-Lewandowski et al. 2012; the 16th-note grid of
  Huang et al. 2017): four voices (soprano, alto, tenor, bass) per 16th note,
  serialized voice by voice per step (S, A, T, B, S, A, T, B, ...) as in the
  Music Transformer paper. Ids (`JSB_VOCABULARY_SIZE` = 132)::

      0 JSB_PAD_ID, 1 JSB_START_ID, 2 JSB_END_ID, 3 JSB_REST_ID,
      4 .. 131 MIDI pitch 0..127 (JSB_PITCH_OFFSET + pitch)

Where things are done (a design choice). MIDI files are read and written by
`symusic` (a C++ MIDI library on PyPI, the parser under miditok): it pairs
note-on/note-off messages and splits tracks by channel and program, two
orders of magnitude faster than `pretty_midi` (0.3 ms instead of ~80 ms for a
POP909 song). Ticks become seconds here, in float64, with the tempo map
computed the way `pretty_midi` computes it (symusic's own seconds are
float32, which would move a time lying on a 5 ms rounding boundary to the
other 10 ms step). So the events are those of the earlier pretty_midi-based
encoder (a test pins them on every shipped file), with one difference: when a
key is struck again on a channel while its previous note still sounds,
pretty_midi ends both notes at the first note-off, while symusic pairs
note-offs first in, first out, so the later note keeps its own note-off (in
POP909, 163 of 1.5 million notes, in 7 of the 909 songs). We considered
miditok's `MIDILike` tokenizer (closest to the paper): its time shifts are
measured in beats (ticks per beat), not in absolute 10 ms steps, and its
vocabulary layout differs, so it does not give the paper's representation;
Magenta's `note_seq` does, but pulls in a large dependency tree. The event
encoding itself is a few dozen lines of NumPy here. The sustain pedal is
applied before encoding, as in the paper's data pipeline (a note released
while CC64 >= 64 sounds until the pedal is released; striking the same pitch
again ends the earlier note).

Augmentation (Huang et al. 2018, section 5.2: transpositions of up to +-3
semitones, time stretches of up to +-5%) acts on event arrays, so a data set is
parsed and encoded once and augmented freshly for every example: `transpose`
shifts note ids exactly; `time_stretch` decodes to notes, scales their times
and re-encodes (times are quantized again to 10 ms).

Pure Python + NumPy; `symusic` is imported on first use. No TensorFlow.

Reference:
    Huang et al. 2018, "Music Transformer: Generating Music with Long-Term
    Structure", sections 5.1-5.2. Oore et al. 2018, "This Time with Feeling:
    Learning Expressive Musical Performance", section 6.1.
"""

from keras_attn.preprocessing.jsb_chorales import (  # noqa: F401 (re-exported)
    JSB_END_ID,
    JSB_FILENAME,
    JSB_NUM_VOICES,
    JSB_PAD_ID,
    JSB_PITCH_OFFSET,
    JSB_REST_ID,
    JSB_START_ID,
    JSB_VOCABULARY_SIZE,
    JSB_VOICES,
    chorale_to_midi,
    chorale_to_tokens,
    load_jsb_chorales,
    tokens_to_chorale,
)
from keras_attn.preprocessing.midi import (  # noqa: F401 (re-exported)
    events_to_midi,
    load_midi,
    midi_to_events,
    midi_to_notes,
)
from keras_attn.preprocessing.music_augmentation import (  # noqa: F401 (re-exported)
    AUGMENTATION_SEMITONES,
    AUGMENTATION_STRETCHES,
    augment,
    time_stretch,
    transpose,
)
from keras_attn.preprocessing.performance_events import (  # noqa: F401 (re-exported)
    DEFAULT_VELOCITY,
    END_ID,
    MAX_SECONDS,
    NOTE_OFF_OFFSET,
    NOTE_ON_OFFSET,
    NUM_PITCHES,
    NUM_TIME_SHIFTS,
    NUM_VELOCITY_BINS,
    PAD_ID,
    START_ID,
    STEPS_PER_SECOND,
    SUSTAIN_PEDAL_CONTROL,
    TIME_SHIFT_OFFSET,
    VELOCITY_BIN_WIDTH,
    VELOCITY_OFFSET,
    VOCABULARY_SIZE,
    Note,
    bin_to_velocity,
    event_to_string,
    events_to_notes,
    notes_to_events,
    velocity_to_bin,
)
