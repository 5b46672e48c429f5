import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_attn")
class Projection(keras.layers.Dense):
    """`keras.layers.Dense` whose bias is added in a form that keeps
    single-position decoding fast under XLA on CPUs.

    The library's layers make their projections with it (query/key/value
    and output projections, feed-forward layers, the models' logits). It is
    `keras.layers.Dense` in every way (arguments, weights and their paths,
    LoRA, quantization, saving) but one: its `call` computes
    `inputs @ kernel - (-bias)` instead of `inputs @ kernel + bias`. The
    two are the same number in IEEE arithmetic (negation is exact, and
    `x - (-b)` is the addition `x + b`), so outputs and gradients are
    bit-identical.

    LoRA on a projection inside a block (e.g. `enable_lora(4)` on the
    `Projection`s of a `TransformerEncoder`) behaves as on the `Dense`
    sublayers of keras `MultiHeadAttention`: it is not part of the block's
    config, so `.keras` saves each kernel with the LoRA update merged in
    and the loaded model has plain projections, with the same outputs.
    Call `enable_lora` on them again after loading to go on fine-tuning.

    Why: for a decoding step at batch 1 the product is a matrix-vector
    product. XLA's CPU compiler fuses a matrix-vector product with an
    `add` that is its only user into one "output fusion" kernel, which on
    these machines runs slower than its plain matrix-vector kernel followed
    by the add fused into the next element-wise work. A subtraction is not
    fused that way. Measured (`benchmarks/generation_benchmark.py`, 6-layer
    d512 LM, TensorFlow + XLA, 2 CPU cores): 16-20 % fewer ms per token at
    batch 1, unchanged at batch 8 and on JAX.

    Args:
        units: N, the output width (positive int).
        **kwargs: the other `keras.layers.Dense` arguments (`activation`,
            `use_bias`, `kernel_initializer`, `bias_initializer`, ...,
            `dtype`, `name`).

    Call arguments:
        inputs: (..., D) tensor.
        training: unused (as `Dense`).

    Returns:
        (..., N) tensor: `activation(inputs @ kernel + bias)`.

    Raises:
        ValueError: as `keras.layers.Dense` (e.g. inputs whose last axis
            does not match the kernel).

    Example:
    >>> import keras
    >>> import numpy as np
    >>> from keras_attn.layers import Projection
    >>> layer = Projection(3, bias_initializer="ones")
    >>> x = np.ones((2, 1, 4), "float32")
    >>> y = keras.ops.convert_to_numpy(layer(x))
    >>> y.shape
    (2, 1, 3)
    >>> kernel = keras.ops.convert_to_numpy(layer.kernel)
    >>> bool(np.allclose(y, x @ kernel + 1.0))
    True

    Reference:
        Vaswani et al. 2017, "Attention Is All You Need", sections 3.2.2
        (projections) and 3.3 (position-wise feed-forward networks).
    """

    def call(self, inputs, training=None):
        x = ops.matmul(inputs, self.kernel)
        if self.bias is not None:
            x = ops.subtract(x, ops.negative(self.bias))
        if self.activation is not None:
            x = self.activation(x)
        return x
