"""Subword tokenization inside the TensorFlow graph (SentencePiece)."""

import contextlib
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

    Reserved ids: 0 = padding, 1 = unknown, 2 = start, 3 = end. A `tf.Module` (the proto is
    saved with the graph); text handling: docs/guides/preprocessing.md.

    Args:
        model_proto: `bytes`, a SentencePiece model reserving ids 0-3 (as `train` makes it).
        name: module name. Defaults to `"subword_tokenizer"`.

    Raises:
        ValueError: if `model_proto` is not a SentencePiece model reserving ids 0-3.

    Example:
    >>> from keras_attn.preprocessing.subword_tokenizer import SubwordTokenizer
    >>> sentences = ["Ein Hund rennt.", "A dog runs."] * 50
    >>> tokenizer = SubwordTokenizer.train(sentences, vocabulary_size=300)
    >>> ids = tokenizer.tokenize(["A dog runs."], add_start=True, add_end=True)
    >>> tokenizer.detokenize(ids).numpy()
    array([b'A dog runs.'], dtype=object)

    Reference:
        Kudo & Richardson 2018, "SentencePiece"; Sennrich et al. 2016 (BPE).
    """

    pad_id = PAD_ID
    unknown_id = UNKNOWN_ID
    start_id = START_ID
    end_id = END_ID

    def __init__(self, model_proto, name=None):
        if isinstance(model_proto, (bytearray, memoryview)):
            model_proto = bytes(model_proto)
        ok = isinstance(model_proto, bytes) and model_proto
        checks.require(ok, "model_proto", model_proto, "the bytes of a SentencePiece model")
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
                raise ValueError(f"`model_proto` is not a SentencePiece model: {error}") from None
            self._check_reserved_ids()

    def _check_reserved_ids(self):
        size = self._vocabulary_size
        unknown = int(self._sentencepiece.string_to_id("\u0001 surely not a piece \u0001"))
        if size > END_ID + 1:  # Control symbols decode to nothing, also between two pieces.
            pairs = tf.ragged.constant([[4, 4], [4, PAD_ID, START_ID, END_ID, 4]])
            plain, probe = self._sentencepiece.detokenize(pairs).numpy()
        if size <= END_ID + 1 or plain != probe or unknown != UNKNOWN_ID:
            received = f"Received: {size} ids, unknown = {unknown}."
            raise ValueError(f"The model must reserve ids 0-3 (pad, unk, start, end). {received}")

    @property
    def vocabulary_size(self):
        """Number of ids, reserved ids included (a Python int)."""
        return self._vocabulary_size

    def tokenize(self, strings, max_length=None, add_start=False, add_end=False):
        """Splits sentences into subword ids.

        Args:
            strings: (B,) string tensor (or list of str / bytes), UTF-8.
            max_length: optional int, the most ids per sentence (start and end included).
            add_start: prepend the start id (2).
            add_end: append the end id (3).

        Returns:
            (B, None) int32 `tf.RaggedTensor` of ids (int64 row splits).

        Raises:
            ValueError: for bad `strings` or a `max_length` leaving no room for a piece.
        """
        with contextlib.suppress(TypeError, ValueError):  # refused below, with the value received
            strings = tf.convert_to_tensor(strings, dtype=tf.string)
        ok = tf.is_tensor(strings) and strings.shape.rank == 1
        checks.require(ok, "strings", strings, "a rank-1 batch of `str`", "Wrap one in a list.")
        num_special = int(bool(add_start)) + int(bool(add_end))
        ok = max_length is None or checks.is_int(max_length, num_special + 1)
        checks.require(ok, "max_length", max_length, f"None or an int > {num_special}")
        ids = self._sentencepiece.tokenize(strings)
        if max_length is not None:
            ids = ids[:, : int(max_length) - num_special]
        if not num_special:
            return ids
        column = tf.ones(tf.stack([ids.nrows(), 1]), tf.int32)  # tf.concat makes it ragged
        start, end = [column * START_ID] * bool(add_start), [column * END_ID] * bool(add_end)
        return tf.concat(start + [ids] + end, axis=1)

    def detokenize(self, ids):
        """Turns ids back into sentences, dropping padding and start, cut at the first end id.

        Args:
            ids: (B, L) int tensor, 0-padded, or (B, None) `tf.RaggedTensor`.

        Returns:
            (B,) string tensor, UTF-8.

        Raises:
            ValueError: if `ids` is not rank 2 or not integer.
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=tf.cast(PAD_ID, ids.dtype))
        ids = tf.convert_to_tensor(ids)
        ok = ids.shape.rank == 2 and ids.dtype.is_integer
        checks.require(ok, "ids", ids, "a rank-2 (batch, length) integer tensor")
        ids = self._known_ids(ids)
        is_end = tf.cast(ids == END_ID, tf.int32)
        before_end = tf.cumsum(is_end, axis=1) == 0
        keep = before_end & (ids != PAD_ID) & (ids != START_ID)
        return self._sentencepiece.detokenize(tf.ragged.boolean_mask(ids, keep))

    def id_to_piece(self, ids):
        """The vocabulary pieces of token ids, for display ("▁" starts a word; unknown: "<unk>").

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
        """Integer `ids` as int32, those outside the vocabulary replaced by the unknown id."""
        wide = tf.cast(ids, tf.int64)
        out_of_range = (wide < 0) | (wide >= self._vocabulary_size)
        return tf.cast(tf.where(out_of_range, tf.constant(UNKNOWN_ID, tf.int64), wide), tf.int32)

    def save(self, path):
        """Writes the SentencePiece model proto to `path` (a `.model` file).

        Args:
            path: file path (local or any filesystem `tf.io.gfile` knows).
        """
        with tf.io.gfile.GFile(path, "wb") as f:
            f.write(self.model_proto)

    @classmethod
    def from_file(cls, path, name=None):
        """Reads a tokenizer from a SentencePiece `.model` file.

        Args:
            path: file written by `save` (or by `spm_train`, reserving ids 0-3).
            name: module name.

        Returns:
            A `SubwordTokenizer`.

        Raises:
            ValueError: if the file does not exist or is not a suitable model.
        """
        ok = tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)
        checks.require(ok, "path", path, "a SentencePiece model file")
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

        Deterministic. For a shared vocabulary pass both sides: `train(german + english)`.

        Args:
            sentences: iterable of `str` (over 4192 UTF-8 bytes: left out, with a warning).
            vocabulary_size: number of ids, >= 262 (6 without `byte_fallback`) plus characters.
            model_type: `"bpe"` (Sennrich et al. 2016) or `"unigram"` (Kudo 2018).
            character_coverage: fraction of characters the vocabulary covers.
            byte_fallback: spell unknown characters as UTF-8 byte pieces, not the unknown id.
            normalization_rule_name: `"nmt_nfkc"`, `"nfkc"` or `"identity"`.
            seed: seed of SentencePiece's random generator.
            name: module name.

        Returns:
            A `SubwordTokenizer`.

        Raises:
            ValueError: for a bad argument, or a text too small for `vocabulary_size`.
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
                f"`sentences` must be a non-empty list of `str`. Received: {received}."
            )
        sizes = [len(s.encode("utf-8", "surrogatepass")) for s in sentences]
        too_long = sum(size > MAX_SENTENCE_BYTES for size in sizes)
        if not any(size <= MAX_SENTENCE_BYTES and s.strip() for s, size in zip(sentences, sizes)):
            blank = sum(not s.strip() for s in sentences)
            received = f"Received: {blank} blank, {too_long} longer."
            raise ValueError(f"`sentences` needs a non-blank one of <= 4192 bytes. {received}")
        if too_long:
            warnings.warn(
                f"{too_long} of the {len(sentences)} sentences are longer than SentencePiece's limit of "
                f"{MAX_SENTENCE_BYTES} UTF-8 bytes and are left out of training. Split them to use them.",
                stacklevel=2,
            )
        checks.require(model_type in ("bpe", "unigram"), "model_type", model_type, "bpe or unigram")
        byte_pieces = 256 if byte_fallback else 0
        minimum = END_ID + 3 + byte_pieces
        ok = checks.is_int(vocabulary_size, minimum)
        checks.require(ok, "vocabulary_size", vocabulary_size, f"an int >= {minimum}")
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
            raise ValueError(f"SentencePiece training failed: {error}") from None
        return cls(writer.getvalue(), name=name)
