"""Subword tokenization inside the TensorFlow graph (SentencePiece)."""

import hashlib
import io
import warnings

from keras_attn import checks
from keras_attn.extras import needs_extra

with needs_extra("tensorflow", "keras_attn.preprocessing.subword_tokenizer"):
    import tensorflow as tf
    import tensorflow_text as tf_text
    from tensorflow_text.python.ops.sentencepiece_tokenizer import (
        gen_sentencepiece_tokenizer as _sentencepiece_ops,
    )

PAD_ID = 0
UNKNOWN_ID = 1
START_ID = 2
END_ID = 3
# SentencePiece's max_sentence_length (UTF-8 bytes): longer sentences are left out of training.
MAX_SENTENCE_BYTES = 4192


class _SharedSentencepieceModel(tf.saved_model.experimental.TrackableResource):
    """A SentencePiece model resource with a shared name (see below)."""

    def __init__(self, model_proto, shared_name, name):
        super().__init__()
        self._model_proto = model_proto
        self._shared_name = shared_name
        self._name = name
        _ = self.resource_handle  # Creates the resource now.

    def _create_resource(self):
        with tf.name_scope(self._name):
            return _sentencepiece_ops.sentencepiece_op(
                model=self._model_proto, shared_name=self._shared_name
            )


class SubwordTokenizer(tf.Module):
    """SentencePiece subword tokenizer that runs in the TensorFlow graph.

    Wraps `tensorflow_text.SentencepieceTokenizer` around a serialized
    SentencePiece model, with the project's reserved ids: 0 = padding,
    1 = unknown, 2 = start, 3 = end. As a `tf.Module` it is tracked by
    `tf.saved_model.save` (and by `keras.export.ExportArchive.track`): the
    model proto is embedded in the graph, and the exported graph needs only
    `tensorflow` and `tensorflow_text` to run. Both methods work eagerly, in
    `tf.data` pipelines and inside `tf.function`.

    Use `SubwordTokenizer.train(sentences, ...)` to learn a vocabulary from
    training text (needs the `sentencepiece` package, training time only),
    `save(path)` / `SubwordTokenizer.from_file(path)` to share it between
    training and export, and `SubwordTokenizer(model_proto)` to wrap an
    existing proto.

    Text handling (models trained with `train`, default settings):
    - case and punctuation are kept; text is NFKC-normalized and whitespace
      is collapsed (leading, trailing and repeated spaces removed; U+00A0
      becomes a space), so `detokenize(tokenize(s)) == s` for any NFKC text
      with single spaces, and detokenized output can be scored with
      sacrebleu against raw references;
    - byte fallback: characters not in the vocabulary become UTF-8 byte
      pieces, so no valid text ever maps to the unknown id;
    - the empty string gives zero tokens (before start/end are added) and
      detokenizes to the empty string;
    - bytes that are not valid UTF-8 do not raise: each invalid byte is
      replaced by U+FFFD (the replacement character), e.g. b"\\xff\\xfe"
      detokenizes to "\\ufffd\\ufffd" (as Python's `errors="replace"`);
    - very long inputs: `tokenize(..., max_length=L)` keeps the first
      `L - add_start - add_end` pieces, then adds start/end, so the result
      never exceeds L ids and always ends with the end id when asked to.

    Args:
        model_proto: `bytes`, a serialized SentencePiece `ModelProto` whose
            ids 0, 2, 3 are control symbols (padding, start, end) and id 1 is
            the unknown piece, as produced by `SubwordTokenizer.train`.
        name: module name. Defaults to `"subword_tokenizer"`.

    Raises:
        ValueError: if `model_proto` is not bytes, cannot be parsed by
            SentencePiece, or does not reserve ids 0-3 as described.

    Example:

    >>> from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
    >>> tokenizer = SubwordTokenizer.train(
    ...     ["Ein Hund rennt.", "A dog runs."] * 50, vocabulary_size=300)
    >>> ids = tokenizer.tokenize(["A dog runs."], add_start=True, add_end=True)
    >>> int(ids[0, 0]), int(ids[0, -1])
    (2, 3)
    >>> tokenizer.detokenize(ids).numpy()
    array([b'A dog runs.'], dtype=object)

    Reference:
        Kudo & Richardson 2018, "SentencePiece: A simple and language
        independent subword tokenizer and detokenizer for Neural Text
        Processing"; Sennrich et al. 2016, "Neural Machine Translation of
        Rare Words with Subword Units" (BPE); Vaswani et al. 2017, "Attention
        Is All You Need", section 5.1 (shared source-target vocabulary).
    """

    pad_id = PAD_ID
    unknown_id = UNKNOWN_ID
    start_id = START_ID
    end_id = END_ID

    def __init__(self, model_proto, name=None):
        if isinstance(model_proto, (bytearray, memoryview)):
            model_proto = bytes(model_proto)
        checks.require(
            isinstance(model_proto, bytes) and model_proto,
            "model_proto",
            model_proto,
            "the non-empty serialized SentencePiece model (bytes), e.g. a `.model` file",
        )
        super().__init__(name=name or "subword_tokenizer")
        self.model_proto = model_proto
        # Creating and checking the resource must happen eagerly even when a
        # tokenizer is built inside a tf.function.
        with tf.init_scope():
            try:
                digest = hashlib.sha256(model_proto).hexdigest()[:16]
                name_scope = f"sentencepiece_{digest}"
                self._sentencepiece = tf_text.SentencepieceTokenizer(
                    model=model_proto, out_type=tf.int32, name=name_scope
                )
                # tf-text's own resource is private to its kernel: TF deletes
                # it whenever the eager kernel cache is cleared, which
                # `tf.random.set_seed` / `keras.utils.set_random_seed` do, and
                # every later call fails with "Resource ... does not exist".
                # Also, two such ops of the same name in one SavedModel share
                # one model after `tf.saved_model.load`. A resource with a
                # shared name (the proto's hash: equal protos may share it)
                # avoids both.
                self._sentencepiece._model_resource = _SharedSentencepieceModel(
                    model_proto, shared_name=f"keras_attn_{name_scope}", name=name_scope
                )
                self._vocabulary_size = int(self._sentencepiece.vocab_size())
            except (tf.errors.OpError, RuntimeError) as error:
                raise ValueError(
                    f"`model_proto` could not be loaded as a SentencePiece model "
                    f"({len(model_proto)} bytes): {error}"
                ) from None
            self._check_reserved_ids()

    def _check_reserved_ids(self):
        size = self._vocabulary_size
        unknown = int(self._sentencepiece.string_to_id("\u0001 surely not a piece \u0001"))
        if size > END_ID + 1:  # Control symbols decode to nothing, also between two pieces.
            pairs = tf.ragged.constant([[4, 4], [4, PAD_ID, START_ID, END_ID, 4]])
            plain, probe = self._sentencepiece.detokenize(pairs).numpy()
        if size <= END_ID + 1 or plain != probe or unknown != UNKNOWN_ID:
            raise ValueError(
                "The SentencePiece model must have the control symbols 0 = padding, 2 = start, "
                f"3 = end and 1 = unknown. Received: {size} ids, unknown = {unknown}. Train it "
                "with `SubwordTokenizer.train` (or pad_id=0, unk_id=1, bos_id=2, eos_id=3)."
            )

    @property
    def vocabulary_size(self):
        """Number of ids, reserved ids included (a Python int)."""
        return self._vocabulary_size

    def tokenize(self, strings, max_length=None, add_start=False, add_end=False):
        """Splits sentences into subword ids.

        Args:
            strings: (B,) string tensor (or list of str / bytes), UTF-8.
            max_length: optional int, the most ids per sentence, start and end
                included. Longer sentences keep their first
                `max_length - add_start - add_end` pieces (the end id, when
                asked for, is still appended).
            add_start: prepend the start id (2).
            add_end: append the end id (3).

        Returns:
            (B, None) int32 `tf.RaggedTensor` of ids (int64 row splits).

        Raises:
            ValueError: if `strings` is not a rank-1 batch of sentences, or
                `max_length` leaves no room for a piece.
        """
        try:
            strings = tf.convert_to_tensor(strings, dtype=tf.string)
        except (TypeError, ValueError):  # refused below, with the value received
            pass
        checks.require(
            tf.is_tensor(strings) and strings.shape.rank == 1,
            "strings",
            strings,
            "a rank-1 batch of sentences (`str`)",
            "Wrap one sentence in a list.",
        )
        num_special = int(bool(add_start)) + int(bool(add_end))
        checks.require(
            max_length is None or checks.is_int(max_length, num_special + 1),
            "max_length",
            max_length,
            f"None or an int greater than the special ids ({num_special})",
        )
        ids = self._sentencepiece.tokenize(strings)
        if max_length is not None:
            ids = ids[:, : int(max_length) - num_special]
        if not num_special:
            return ids
        column = tf.RaggedTensor.from_tensor(
            tf.ones(tf.stack([ids.nrows(), 1]), tf.int32), row_splits_dtype=ids.row_splits.dtype
        )
        start, end = [column * START_ID] * bool(add_start), [column * END_ID] * bool(add_end)
        return tf.concat(start + [ids] + end, axis=1)

    def detokenize(self, ids):
        """Turns ids back into sentences.

        Padding and start ids are dropped, and each row is cut at its first
        end id (what follows is ignored, as after generation stops). Ids
        outside `[0, vocabulary_size)` are read as the unknown id, which
        detokenizes to " ⁇ ".

        Args:
            ids: (B, L) int tensor, 0-padded, or (B, None) `tf.RaggedTensor`
                (any integer dtype, or a nested list).

        Returns:
            (B,) string tensor, UTF-8.

        Raises:
            ValueError: if `ids` is not rank 2 or not integer.
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=tf.cast(PAD_ID, ids.dtype))
        ids = tf.convert_to_tensor(ids)
        checks.require(
            ids.shape.rank == 2 and ids.dtype.is_integer,
            "ids",
            ids,
            "a rank-2 (batch, length) integer tensor",
        )
        ids = self._known_ids(ids)
        is_end = tf.cast(ids == END_ID, tf.int32)
        before_end = tf.cumsum(is_end, axis=1) == 0
        keep = before_end & (ids != PAD_ID) & (ids != START_ID)
        return self._sentencepiece.detokenize(tf.ragged.boolean_mask(ids, keep))

    def id_to_piece(self, ids):
        """The vocabulary pieces of token ids, for display (e.g. the axes of
        an attention plot): "▁" marks the start of a word.

        Ids outside `[0, vocabulary_size)` give the unknown piece "<unk>",
        as `detokenize` reads them as the unknown id (SentencePiece itself
        would crash the process on them).

        Args:
            ids: int tensor or array of any shape.

        Returns:
            A string tensor of the same shape.

        Raises:
            ValueError: if `ids` are not integers.
        """
        ids = tf.convert_to_tensor(ids)
        checks.require(ids.dtype.is_integer, "ids", ids, "integer token ids")
        return self._sentencepiece.id_to_string(self._known_ids(ids))

    def _known_ids(self, ids):
        """Integer `ids` as int32, those outside the vocabulary (compared
        before the cast, so that 2**32 + 5 does not pass as 5) replaced by
        the unknown id."""
        wide = tf.cast(ids, tf.int64)
        out_of_range = (wide < 0) | (wide >= self._vocabulary_size)
        return tf.cast(tf.where(out_of_range, tf.constant(UNKNOWN_ID, tf.int64), wide), tf.int32)

    def save(self, path):
        """Writes the SentencePiece model proto to `path` (a `.model` file).

        The file is the standard SentencePiece format, readable by
        `SubwordTokenizer.from_file` and by the `sentencepiece` tools.

        Args:
            path: file path (local or any filesystem `tf.io.gfile` knows).
        """
        with tf.io.gfile.GFile(path, "wb") as f:
            f.write(self.model_proto)

    @classmethod
    def from_file(cls, path, name=None):
        """Reads a tokenizer from a SentencePiece `.model` file.

        Args:
            path: file written by `save` (or by `spm_train`, if it reserves
                ids 0-3 as this class requires).
            name: module name.

        Returns:
            A `SubwordTokenizer`.

        Raises:
            ValueError: if the file does not exist or is not a suitable model.
        """
        checks.require(
            tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path),
            "path",
            path,
            "a SentencePiece model file",
            "Write one with `SubwordTokenizer.save`.",
        )
        with tf.io.gfile.GFile(path, "rb") as f:
            return cls(f.read(), name=name)

    @classmethod
    def train(
        cls,
        sentences,
        vocabulary_size=8000,
        model_type="bpe",
        character_coverage=1.0,
        byte_fallback=True,
        normalization_rule_name="nmt_nfkc",
        seed=0,
        name=None,
    ):
        """Learns a subword vocabulary from sentences, in memory.

        Training is deterministic: the same sentences and arguments give the
        same model proto, byte for byte (single-threaded, all sentences used,
        fixed random seed). For a joint vocabulary shared by source and
        target (as in the Transformer paper), pass both sides' sentences,
        e.g. `SubwordTokenizer.train(german + english)`; for separate
        vocabularies train one tokenizer per language.

        Needs the `sentencepiece` package (`pip install "keras_attn[tensorflow]"`);
        the resulting tokenizer does not.

        Args:
            sentences: iterable of `str`, one sentence each (raw text).
                Sentences over 4192 UTF-8 bytes (SentencePiece's limit) are
                left out of training, with a warning that counts them.
            vocabulary_size: number of ids: at least 262 (6 without
                `byte_fallback`): the 4 reserved ids, the 256 byte pieces,
                the word-start piece "▁" and one piece per distinct
                character kept (all of them at `character_coverage=1.0`),
                e.g. 262 for a text of one letter.
            model_type: `"bpe"` (Sennrich et al. 2016) or `"unigram"`
                (Kudo 2018).
            character_coverage: fraction of characters covered by the
                vocabulary; 1.0 suits small alphabets such as German/English.
            byte_fallback: spell characters outside the vocabulary as UTF-8
                byte pieces instead of the unknown id.
            normalization_rule_name: SentencePiece normalization,
                `"nmt_nfkc"` (NFKC plus whitespace cleanup), `"nfkc"`, or
                `"identity"`.
            seed: seed of SentencePiece's random generator.
            name: module name.

        Returns:
            A `SubwordTokenizer`.

        Raises:
            ValueError: if `sentences` is not a non-empty list of `str` with
                a sentence of text within 4192 bytes, an argument is out of
                range, or the text is too small (or has too many distinct
                characters) for `vocabulary_size`.
            ModuleNotFoundError: if `sentencepiece` is not installed.
        """
        with needs_extra("tensorflow", "SubwordTokenizer.train"):
            import sentencepiece
        one_text = isinstance(sentences, (str, bytes))  # list() would train on its characters
        sentences = [sentences] if one_text else list(sentences)
        types = sorted({type(s).__name__ for s in sentences})
        if one_text or types != ["str"]:
            received = "one string" if one_text else f"{len(sentences)} items of types {types}"
            raise ValueError(
                f"`sentences` must be a non-empty list of `str`. Received: {received}. "
                "Pass `[text]` or `text.splitlines()`; decode bytes first."
            )
        sizes = [len(s.encode("utf-8", "surrogatepass")) for s in sentences]
        too_long = sum(size > MAX_SENTENCE_BYTES for size in sizes)
        if not any(size <= MAX_SENTENCE_BYTES and s.strip() for s, size in zip(sentences, sizes)):
            blank = sum(not s.strip() for s in sentences)
            raise ValueError(
                "`sentences` must hold a non-blank sentence of at most 4192 UTF-8 bytes. "
                f"Received: {blank} blank, {too_long} longer. Split long text."
            )
        if too_long:
            warnings.warn(
                f"{too_long} of the {len(sentences)} sentences are longer than SentencePiece's limit of "
                f"{MAX_SENTENCE_BYTES} UTF-8 bytes and are left out of training. Split them to use them.",
                stacklevel=2,
            )
        checks.require(
            model_type in ("bpe", "unigram"), "model_type", model_type, "'bpe' or 'unigram'"
        )
        byte_pieces = 256 if byte_fallback else 0
        minimum = END_ID + 3 + byte_pieces
        checks.require(
            checks.is_int(vocabulary_size, minimum),
            "vocabulary_size",
            vocabulary_size,
            f'an int >= {minimum} (4 reserved ids, {byte_pieces} byte pieces, "▁" and a character)',
        )
        writer = io.BytesIO()
        sentencepiece.set_random_generator_seed(seed)
        try:
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_writer=writer,
                vocab_size=int(vocabulary_size),
                model_type=model_type,
                character_coverage=character_coverage,
                byte_fallback=byte_fallback,
                normalization_rule_name=normalization_rule_name,
                pad_id=PAD_ID,
                unk_id=UNKNOWN_ID,
                bos_id=START_ID,
                eos_id=END_ID,
                pad_piece="<pad>",
                unk_piece="<unk>",
                bos_piece="<s>",
                eos_piece="</s>",
                # Determinism: every sentence, in order, one thread.
                input_sentence_size=0,
                shuffle_input_sentence=False,
                num_threads=1,
                minloglevel=2,
            )
        except RuntimeError as error:
            raise ValueError(
                f"SentencePiece training failed for vocabulary_size={vocabulary_size}, "
                f"model_type={model_type!r} on {len(sentences)} sentences: {error}"
            ) from None
        return cls(writer.getvalue(), name=name)
