import keras
import numpy as np
import pytest

from keras_attn.layers import TokenEmbedding
from tests.test_case import run_layer_test, traced

IDS = np.array([[1, 2, 19, 0], [4, 5, 6, 7]], "int32")


def test_keras_embedding_with_the_same_weights():
    layer = TokenEmbedding(20, 8, mask_zero=True)
    keras_layer = keras.layers.Embedding(20, 8, mask_zero=True)
    layer.build((None, 4))
    keras_layer.build((None, 4))
    keras_layer.set_weights(layer.get_weights())
    np.testing.assert_array_equal(np.asarray(layer(IDS)), np.asarray(keras_layer(IDS)))
    np.testing.assert_array_equal(np.asarray(layer(IDS)), np.asarray(layer.embeddings)[IDS])
    np.testing.assert_array_equal(np.asarray(layer.compute_mask(IDS)), IDS != 0)
    # Weights where a Keras Embedding keeps them: checkpoints load across.
    named = TokenEmbedding(20, 8, name="words")
    named.build((None, 4))
    assert [w.path for w in named.weights] == ["words/embeddings"]


def test_layer_lifecycle():
    run_layer_test(
        TokenEmbedding,
        {"input_dim": 20, "output_dim": 8, "mask_zero": True},
        IDS,
        expected_output_shape=(2, 4, 8),
        expected_num_trainable_weights=1,
        run_mixed_precision=False,
        run_fit=False,
    )


@pytest.mark.parametrize("ids, lowest, highest", [([[3, 20]], 3, 20), ([[-1, 3]], -1, 3)])
def test_ids_outside_the_table(ids, lowest, highest):
    layer = TokenEmbedding(20, 4, name="tokens")
    message = (
        r"TokenEmbedding tokens: token ids must lie in \[0, 20\), the rows of its table\. "
        r"Map unknown tokens to known ids\. Received: token ids from"
    )
    with pytest.raises(ValueError, match=rf"{message} {lowest} to {highest}\."):
        layer(np.array(ids))
    # Traced ids are checked where they enter (generation, exported
    # signatures), not in the layer: a traced call is the plain lookup.
    run = traced(lambda x: layer(x))
    np.testing.assert_array_equal(
        np.asarray(run(np.array([[0, 19]]))), np.asarray(layer(np.array([[0, 19]])))
    )
