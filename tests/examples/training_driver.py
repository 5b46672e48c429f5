"""Runs an example's training in this (fresh) process, as its train.py's
main() would, and records what the tests compare.

    python tests/examples/training_driver.py SPEC.json

SPEC: {"example": "super_resolution" | "music" | "translation",
       "logical_cpus": int (split the CPU into that many logical devices
                       before TensorFlow starts; optional),
       "runs": [{"argv": [...train.py flags...], "result": "path.npz",
                 "kill_at_step": int (optional)}, ...]}

Each run writes `result`: the final weights (`weight_<i>`, their variable
paths in `paths`), the optimizer's
`iterations` at the start and end of fit, the epochs fit ran, and the
running mean loss after every batch (`batch_loss`). With `kill_at_step`,
the process dies (`os._exit(KILLED_EXIT_CODE)`, no cleanup, no flushing,
as a SIGKILL) in `on_train_batch_end` once the optimizer has made that
many updates; later runs of the spec do not run.
"""

import importlib.util
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KILLED_EXIT_CODE = 37


def load_example(name):
    folder = os.path.join(ROOT, "examples", name)
    spec = importlib.util.spec_from_file_location(f"{name}_train", os.path.join(folder, "train.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train(name, module, args, strategy, callbacks):
    if name == "super_resolution":
        return module.train(args, module.load_data(args), strategy, callbacks)
    if name == "music":
        return module.train(args, *module.load_data(args), strategy, callbacks)
    if name == "translation":
        train_pairs, val_pairs = module.load_pairs(args)
        tokenizer = module.load_or_train_tokenizer(args, *train_pairs)
        return module.train(args, tokenizer, train_pairs, val_pairs, strategy, callbacks)
    raise ValueError(name)


def main(spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    import tensorflow as tf

    if spec.get("logical_cpus", 1) > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * spec["logical_cpus"]
        )
    import keras
    import numpy as np

    name = spec["example"]
    module = load_example(name)
    training_utils = sys.modules["training_utils"]
    strategies = {}

    class Recorder(keras.callbacks.Callback):
        def __init__(self, path, kill_at_step):
            super().__init__()
            self.path, self.kill_at_step = path, kill_at_step
            self.batch_loss, self.epochs = [], []

        def on_train_begin(self, logs=None):
            # Runs after the backup callback (listed before this one) restored.
            self.start_iterations = int(self.model.optimizer.iterations.numpy())

        def on_epoch_begin(self, epoch, logs=None):
            self.epochs.append(epoch)

        def on_train_batch_end(self, batch, logs=None):
            self.batch_loss.append(float(logs["loss"]))
            if (
                self.kill_at_step
                and int(self.model.optimizer.iterations.numpy()) >= self.kill_at_step
            ):
                sys.stdout.flush()
                os._exit(KILLED_EXIT_CODE)

        def on_train_end(self, logs=None):
            weights = {f"weight_{i}": w for i, w in enumerate(self.model.get_weights())}
            np.savez(
                self.path,
                start_iterations=self.start_iterations,
                iterations=int(self.model.optimizer.iterations.numpy()),
                epochs=np.array(self.epochs),
                batch_loss=np.array(self.batch_loss),
                paths=np.array([v.path for v in self.model.weights]),
                **weights,
            )

    for run in spec["runs"]:
        args = module.parse_args(run["argv"])
        if args.strategy not in strategies:  # one per process, as TF wants
            strategies[args.strategy] = training_utils.make_strategy(args.strategy, tpu=args.tpu)
        strategy = strategies[args.strategy]
        args.output_dir = training_utils.worker_output_dir(strategy, args.output_dir)
        keras.utils.set_random_seed(args.seed)
        os.makedirs(args.output_dir, exist_ok=True)
        recorder = Recorder(run["result"], run.get("kill_at_step"))
        train(name, module, args, strategy, [recorder])
        print(f"replicas={strategy.num_replicas_in_sync} result={run['result']}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
