"""Data preprocessing: music (MIDI <-> performance events, JSB Chorales), text, images.

Submodules are imported explicitly so that importing this package loads
neither TensorFlow nor a MIDI library, e.g.::

    from keras_attn.preprocessing import music
    from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
    from keras_attn.preprocessing.text import make_translation_dataset

What needs more than NumPy comes with an extra of `pip install keras_attn`
(see `keras_attn.extras`), and names its `pip install` line when imported or
called without it: the tokenizer, the tf.data pipelines and TensorFlow's
image ops need `pip install "keras_attn[tensorflow]"`, reading and writing
MIDI needs `pip install "keras_attn[music]"` (symusic), reading picture files
needs `pip install "keras_attn[images]"` (Pillow). Importing this package
needs none of them.
"""
