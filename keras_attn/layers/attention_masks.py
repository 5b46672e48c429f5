import dataclasses
import functools

from keras import ops

from keras_attn.layers import attention_ops


@dataclasses.dataclass(frozen=True)
class AttentionMasks:
    """The masks of one attention call, as the attention layers hand them (checked) to their
    cores (`MultiHeadSelfAttention._attend`). Boolean, True = may attend.

    Args:
        padding_mask: (B, S) bool or None, True for real keys.
        attention_mask: (B, 1 or H, T, S) bool or None.
        use_causal_mask: whether a query sees only keys at or before its own position.
        cache_index: absolute position of query 0 (int or int32 scalar).
        valid_key_length: with a cache, the positions filled (`cache_index + T`); else None.

    Example:
    >>> from keras_attn.layers.attention_masks import AttentionMasks
    >>> masks = AttentionMasks(use_causal_mask=True)
    >>> masks.may_have_empty_rows, masks.cached
    (False, False)
    >>> import keras
    >>> keras.ops.convert_to_numpy(masks.merged(2, 2)).tolist()
    [[[[True, False], [True, True]]]]

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", section 3.2.3.
    """

    padding_mask: object = None
    attention_mask: object = None
    use_causal_mask: bool = False
    cache_index: object = 0
    valid_key_length: object = None

    @property
    def cached(self):
        """Whether the keys come from a cache."""
        return self.valid_key_length is not None

    @property
    def may_have_empty_rows(self):
        """Whether a query may see no key (only padding or attention masks can empty a row)."""
        return self.padding_mask is not None or self.attention_mask is not None

    def query_rows(self, start, stop):
        """The masks of queries `start .. stop - 1` of a causal call against keys `0 .. stop - 1`."""
        padding, attention = self.padding_mask, self.attention_mask
        return AttentionMasks(
            padding_mask=None if padding is None else padding[:, :stop],
            attention_mask=None if attention is None else attention[..., start:stop, :stop],
            use_causal_mask=True,
            cache_index=self.cache_index + start,
        )

    def merged(self, query_length, key_length):
        """All masks as one bool tensor broadcastable to (B, H, T, S), or None when nothing is
        masked. Nothing is expanded to a full size: (1, 1, T, S) causal, (B, 1, 1, S) padding,
        (B, 1 or H, T, S) attention; with a cache, keys at or past `valid_key_length` (empty
        slots) are blocked."""
        masks = []
        if self.padding_mask is not None:
            masks.append(self.padding_mask[:, None, None, :])
        if self.attention_mask is not None:
            masks.append(self.attention_mask)
        if self.use_causal_mask:
            causal = attention_ops.causal_mask(query_length, key_length, self.cache_index)
            masks.append(causal[None, None])
        elif self.cached:
            key_positions = attention_ops.positions(key_length)[None, None, None, :]
            masks.append(ops.less(key_positions, ops.cast(self.valid_key_length, "int32")))
        return functools.reduce(ops.logical_and, masks) if masks else None
