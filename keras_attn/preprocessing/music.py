"""Music data for the Music Transformer: MIDI <-> performance events (391 ids), JSB Chorales.

Layouts, vocabularies and design choices: docs/guides/preprocessing.md.

Reference:
    Huang et al. 2018, "Music Transformer: Generating Music with Long-Term Structure";
    Oore et al. 2018, "This Time with Feeling: Learning Expressive Musical Performance".
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
    transpose_chorale_tokens,
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
