"""Argument checks the model builders share (each raises a ValueError that
names the argument, what was received and what is expected)."""


def check_sizes(**sizes):
    """Raises a ValueError unless every keyword value is a positive int.

    Args:
        **sizes: argument name -> value received (bools are refused).

    Raises:
        ValueError: naming the first argument that is not a positive int.
    """
    for arg, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"`{arg}` must be a positive integer. Received: {arg}={value!r}.")


def check_heads_divide(hidden_dim, num_heads):
    """Raises a ValueError unless `num_heads` divides `hidden_dim` (D = H x
    key_dim, as in Vaswani et al. 2017, section 3.2.2).

    Args:
        hidden_dim: D, the model width (positive int).
        num_heads: H (positive int).

    Raises:
        ValueError: if `hidden_dim % num_heads != 0`.
    """
    if hidden_dim % num_heads:
        raise ValueError(
            f"`hidden_dim` ({hidden_dim}) must be divisible by `num_heads` "
            f"({num_heads}): each head gets hidden_dim // num_heads features."
        )
