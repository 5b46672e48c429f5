"""The dense core through `keras.ops.dot_product_attention` (fused) vs our einsum core.

Forward + backward (gradients of the inputs and of every weight), d_model 512, 8 heads x 64, on
the backend KERAS_BACKEND names (tf.function on TensorFlow, jax.jit on JAX, eager on torch):

- `mhsa_ours` / `mhsa_fused`: MultiHeadSelfAttention with our dense core or the fused op
  (`attention_ops._fused_op_is_faster` forced), plain and causal;
- `mhsa_chunked` (with --chunked): MultiHeadSelfAttention(chunk_size=256), the chunked core
  (what chunk_size="auto" ran from S = 2,048 on torch before the fused op);
- `keras_mha`: keras.layers.MultiHeadAttention, the anchor (it runs the fused op);
- `encoder_*` / `decoder_*` (with --blocks): TransformerEncoder (no mask) and TransformerDecoder
  (causal), d_ff 2048, our core / the fused op, keras-hub's blocks as the anchor when installed.

The candidates of one configuration are timed interleaved in one process (warm-up, then
A B C A B C ..., median of --repeats): compare `*_ours` and `*_fused` directly, and each over
its anchor. `after` is the core `_fused_op_is_faster` picks for the backend.
With --memory, the peak memory (rise of ru_maxrss over one call, after tracing) of each candidate
in a fresh process. On TensorFlow and JAX (CPU), MultiHeadSelfAttention runs its chunked core from
S = 2,048 without a causal mask, so the plain rows at T = 4,096 time that core there; on torch
chunk_size="auto" runs the fused op at any length.

Run: `KERAS_BACKEND=jax python benchmarks/fused_attention_benchmark.py [--lengths 1024 4096]
[--batch 4 1] [--blocks] [--memory] [--repeats 5]`; prints a markdown table and writes
benchmarks/results/fused_attention_<backend>.json.
"""

import argparse
import contextlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import peak_memory  # noqa: E402

MODEL_DIM, NUM_HEADS, KEY_DIM, FEED_FORWARD_DIM = 512, 8, 64, 2048


@contextlib.contextmanager
def dense_core(name):
    """Our core ("ours") or `keras.ops.dot_product_attention` ("fused") while traced / run."""
    from keras_attn.layers import attention_ops

    saved = attention_ops._fused_op_is_faster
    attention_ops._fused_op_is_faster = lambda: name == "fused"
    try:
        yield
    finally:
        attention_ops._fused_op_is_faster = saved


def make_forward(name, causal):
    """(forward(x), layer) of a candidate: mhsa_*, encoder_*, decoder_*, keras_mha, keras_hub_*."""
    import keras

    from keras_attn import layers

    if name.startswith("mhsa"):
        chunk_size = 256 if name == "mhsa_chunked" else "auto"
        layer = layers.MultiHeadSelfAttention(
            num_heads=NUM_HEADS, key_dim=KEY_DIM, chunk_size=chunk_size
        )
        forward = lambda x: layer(x, use_causal_mask=causal)  # noqa: E731
    elif name == "keras_mha":
        layer = keras.layers.MultiHeadAttention(num_heads=NUM_HEADS, key_dim=KEY_DIM)
        layer.build((None, None, MODEL_DIM), (None, None, MODEL_DIM))
        return (lambda x: layer(x, x, use_causal_mask=causal)), layer
    else:
        if name.startswith("keras_hub"):
            from keras_hub import layers
        cls = layers.TransformerDecoder if "decoder" in name else layers.TransformerEncoder
        layer = cls(intermediate_dim=FEED_FORWARD_DIM, num_heads=NUM_HEADS)
        forward = lambda x: layer(x)  # noqa: E731
    layer.build((None, None, MODEL_DIM))
    return forward, layer


def make_step(forward, layer, x):
    """A function of no argument: one forward + backward step on `x` (compiled beforehand on
    TensorFlow and JAX), returning a scalar that depends on every gradient."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        step = harness.forward_backward_step(forward, layer.trainable_weights, jit_compile=False)
        step.get_concrete_function(x)
        return lambda: step(x)
    variables = layer.trainable_weights
    if backend == "jax":
        import jax

        def loss(x, values):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return keras.ops.mean(keras.ops.square(keras.ops.cast(forward(x), "float32")))

        def step(x, values):
            grads = jax.grad(loss, argnums=(0, 1))(x, values)
            return sum(keras.ops.sum(g) for g in jax.tree_util.tree_leaves(grads))

        values = [v.value for v in variables]
        compiled = jax.jit(step).lower(x, values).compile()
        return lambda: compiled(x, values)
    import torch

    def step():
        inputs = x.detach().requires_grad_(True)
        loss = torch.mean(torch.square(forward(inputs).float()))
        grads = torch.autograd.grad(loss, [inputs] + [v.value for v in variables])
        return sum(g.sum() for g in grads).detach()

    return step


def candidate(name, causal, batch, length):
    """A timed callable: the step of `name`, run with its dense core."""
    import keras

    core = name.rsplit("_", 1)[-1]
    x = keras.random.normal((batch, length, MODEL_DIM), seed=length)
    with dense_core(core):
        forward, layer = make_forward(name, causal)
        step = make_step(forward, layer, x)

    def run():
        with dense_core(core):  # eager torch reads the choice at every call
            return step()

    return run


def configurations(args):
    """(label, causal, batch, length, candidate names) to time."""
    import importlib.util

    hub = importlib.util.find_spec("keras_hub") is not None
    for batch, length in zip(args.batch, args.lengths):
        for causal in (False, True):
            label = "causal" if causal else "plain"
            names = ("mhsa_ours", "mhsa_fused") + ("mhsa_chunked",) * args.chunked
            yield f"mhsa {label}", causal, batch, length, names + ("keras_mha",)
        if args.blocks:
            for block in ("encoder", "decoder"):
                names = (f"{block}_ours", f"{block}_fused")
                yield (
                    block,
                    block == "decoder",
                    batch,
                    length,
                    names + (f"keras_hub_{block}",) * hub,
                )


def memory_worker(config):
    import keras

    if keras.backend.backend() == "tensorflow":
        harness.setup_tensorflow()
    run = candidate(config["name"], config["causal"], config["batch"], config["length"])
    peak_memory.memory_worker(run)


def main():
    parser = harness.add_common_arguments(argparse.ArgumentParser(description=__doc__), budget=900)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024])
    parser.add_argument("--batch", type=int, nargs="+", default=[4], help="one per length")
    parser.add_argument("--blocks", action="store_true")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument(
        "--chunked", action="store_true", help="add MultiHeadSelfAttention(chunk_size=256)"
    )
    args = parser.parse_args()
    if args.memory_worker:
        return memory_worker(json.loads(args.memory_worker))
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        harness.setup_tensorflow()
    args.batch = (args.batch * len(args.lengths))[: len(args.lengths)]
    rows, results = [], []
    for label, causal, batch, length, names in configurations(args):
        timing = harness.time_interleaved(
            {name: candidate(name, causal, batch, length) for name in names}, args.repeats
        )
        for name in names:
            record = dict(name=name, causal=causal, batch=batch, length=length, **timing[name])
            if args.memory:
                config = dict(name=name, causal=causal, batch=batch, length=length)
                record["memory"] = peak_memory.measure_memory(__file__, config, timeout=600)
            results.append(record)
        anchor, done = timing[names[-1]]["median_s"], len(rows)
        for name in names:
            memory = results[-len(names) + names.index(name)].get("memory", {})
            rows.append(
                [f"{label} T={length} B={batch}", name, f"{timing[name]['median_s'] * 1e3:.0f}"]
                + [f"{timing[name]['median_s'] / anchor:.2f}x", peak_memory.fmt_mib(memory)]
            )
        print("\n".join(" | ".join(row) for row in rows[done:]), file=sys.stderr, flush=True)
    print(f"\n{backend}, forward + backward, median ms\n")
    headers = ["configuration", "candidate", "ms", "/ anchor", "peak MiB"]
    print(harness.markdown_table(headers, rows))
    path = harness.output_path(args, f"fused_attention_{backend}")
    if path:
        harness.write_results(path, {"environment": harness.environment(), "timing": results})


if __name__ == "__main__":
    main()
