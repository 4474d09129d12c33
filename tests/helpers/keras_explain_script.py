"""Run by tests/test_explain_e2e.py in a subprocess (TensorFlow's own process): a Keras
plan as README's TF2 section makes one (examples/keras_placed.py's MLP, shape-only
variables, estimated costs), placed on cpu:8 within a quarter of its weights and Adam
slots per device, then explained. Exits with pardnn's exit code."""

import os
import sys

import pardnn.tf
import keras
import tensorflow as tf

from pardnn.cli import main

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import keras_placed as example


def main_script(root):
    keras.backend.clear_session()
    with pardnn.tf.shape_only_variables():
        model, opt, step = example.build()
    specs = (tf.TensorSpec([example.BATCH, 64]), tf.TensorSpec([example.BATCH, 8]))
    pardnn.tf.profile_function(step, specs, out_dir=f"{root}/prof", estimate="dgx-h100")
    total = sum(v.shape.num_elements() * 4 for v in model.weights + opt.variables)
    code = main(["place", f"{root}/prof", "--devices", "cpu:8", "--memory", str(total // 4), "--reserve", "0",
                 "-o", f"{root}/placed"])
    return code or main(["explain", f"{root}/placed", "--no-place-again", "--json", f"{root}/explain.json"])


if __name__ == "__main__":
    sys.exit(main_script(sys.argv[1]))
