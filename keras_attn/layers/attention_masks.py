import dataclasses

from keras_attn.layers import attention_ops


@dataclasses.dataclass(frozen=True)
class AttentionMasks:
    """The masks of one self-attention call, as `MultiHeadSelfAttention` hands them (checked)
    to its attention core `_attend`. Boolean, True = may attend.

    Args:
        padding_mask: (B, S) bool or None, True for real keys.
        attention_mask: (B, T, S) or (B, H, T, S) bool or None.
        use_causal_mask: whether a query sees only keys at or before its own position.
        cache_index: absolute position of query 0 (int or int32 scalar).
        valid_key_length: with a cache, the positions filled (`cache_index + T`); else None.

    Example:
    >>> from keras_attn.layers.attention_masks import AttentionMasks
    >>> masks = AttentionMasks(use_causal_mask=True)
    >>> masks.may_have_empty_rows, masks.cached
    (False, False)
    >>> import keras
    >>> keras.ops.convert_to_numpy(masks.merged(1, 2, 2)).tolist()
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

    def merged(self, batch_size, query_length, key_length):
        """All masks as one (B, 1 or H, T, S) bool tensor, or None when nothing is masked."""
        return attention_ops.merge_masks(
            batch_size,
            query_length,
            key_length,
            key_padding_mask=self.padding_mask,
            attention_mask=self.attention_mask,
            use_causal_mask=self.use_causal_mask,
            cache_index=self.cache_index,
            valid_key_length=self.valid_key_length,
        )
