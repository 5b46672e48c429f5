"""Data preprocessing: music (MIDI <-> performance events, JSB Chorales), text, images.

Submodules are imported explicitly so that importing this package loads
neither TensorFlow nor a MIDI library, e.g.::

    from keras_attn.preprocessing import music
    from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
    from keras_attn.preprocessing.text import make_translation_dataset
"""
