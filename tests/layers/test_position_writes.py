import keras
import numpy as np
import pytest

from keras_attn.layers.position_writes import _selecting, select_writes, write_positions


def _numpy_write(buffer, update, index, axis):
    expected = buffer.copy()
    where = [slice(None)] * buffer.ndim
    where[axis] = slice(index, index + update.shape[axis])
    expected[tuple(where)] = update
    return expected


@pytest.mark.parametrize("scoped", [False, True])
@pytest.mark.parametrize(
    "shape, axis, index, length",
    [((2, 5), 1, 3, 1), ((2, 3, 4, 6), 3, 0, 1), ((2, 3, 4, 6), 3, 5, 1), ((2, 6, 3), 1, 2, 3)],
)
def test_writes_the_positions_numpy_does_in_and_out_of_the_scope(
    shape, axis, index, length, scoped
):
    rng = np.random.default_rng(0)
    buffer = rng.normal(size=shape).astype("float32")
    update_shape = list(shape)
    update_shape[axis] = length
    update = rng.normal(size=update_shape).astype("float32")
    if scoped:
        with select_writes():
            got = write_positions(buffer, update, keras.ops.convert_to_tensor(index), axis)
    else:
        got = write_positions(buffer, update, index, axis)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(got), _numpy_write(buffer, update, index, axis)
    )


def test_the_scope_ends_with_its_block_even_on_an_error():
    assert not _selecting()
    with pytest.raises(RuntimeError), select_writes():
        assert _selecting()
        raise RuntimeError("inside")
    assert not _selecting()


@pytest.mark.requires_tensorflow
@pytest.mark.parametrize("jit_compile", [False, True])
def test_an_exporters_plain_loop_writes_by_select_and_an_xla_one_in_place(jit_compile):
    import tensorflow as tf

    from keras_attn.export.archive import xla_function

    def loop(buffer):
        def body(i, b):
            return i + 1, write_positions(b, tf.fill([2, 1], i + 1), i, axis=1)

        return tf.while_loop(lambda i, b: i < 4, body, (0, buffer))[1]

    function = xla_function(loop, jit_compile=jit_compile)
    buffer = tf.zeros((2, 4), tf.int32)
    np.testing.assert_array_equal(function(buffer).numpy(), [[1, 2, 3, 4]] * 2)
    graph = function.get_concrete_function(buffer).graph.as_graph_def()
    ops = {node.op for body in graph.library.function for node in body.node_def}
    assert ("XlaDynamicUpdateSlice" in ops) == jit_compile
    assert ("SelectV2" in ops) == (not jit_compile)
