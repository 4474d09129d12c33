"""The session configuration pardnn profiles and runs graphs with.

Graph rewriting is switched off: grappler's meta optimizer and the classic graph
optimizer's constant folding, common-subexpression elimination and function
inlining. They fuse, fold and rename nodes (MatMul+BiasAdd+Relu become one node
named after the Relu; folded constants get new names), so with them on, a profile
would time nodes the GraphDef does not contain and a placement check would find the
requested nodes gone.

Training code that imports a placed graph may use TF's default configuration
(`default_session_config`, what `pardnn run --config default` uses), but Grappler
does NOT keep every device assignment: its remapper runs a fused pattern on the
device of the pattern's first node, so a placement splitting MatMul+BiasAdd+Relu
loses its BiasAdd and Relu (measured: 3 of the tiny mlp's nodes moved under a
round-robin placement on cpu:4). The loader ties every such pattern into one
colocation group (pardnn.tf.fusion), after which no built-in family has a node
moved under the default config (docs/profiles.md "Fusion").

Soft placement is on, so a node TF cannot run where asked is moved rather than
failing the run; `pardnn.tf.rewrite.check_placement` reports every such move.
"""

import re

import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
import tensorflow as tf

from pardnn.base.errors import UserError
from pardnn.hardware.cluster import MAX_DEVICES

tf1 = tf.compat.v1


def session_config(cpu_devices: int = 1, gpus: bool = False, rewrites: bool = False):
    """ConfigProto with `cpu_devices` virtual CPU devices; GPUs hidden unless `gpus`;
    graph rewriting off unless `rewrites` (then TF's defaults: Grappler on)."""
    count = {"CPU": int(cpu_devices)}
    if not gpus:
        count["GPU"] = 0
    config = tf1.ConfigProto(device_count=count, allow_soft_placement=True)
    if rewrites:
        return config
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    opts = config.graph_options.optimizer_options
    opts.opt_level = tf1.OptimizerOptions.L0
    opts.do_constant_folding = False
    opts.do_common_subexpression_elimination = False
    opts.do_function_inlining = False
    return config


def default_session_config(cpu_devices: int = 1, gpus: bool = False):
    """TF's default ConfigProto (Grappler on, soft placement off) with only the
    device count set: what a user's own training script runs a placed graph with."""
    count = {"CPU": int(cpu_devices)}
    if not gpus:
        count["GPU"] = 0
    return tf1.ConfigProto(device_count=count)


SESSION_CONFIGS = {"pardnn": session_config, "default": default_session_config}


def parse_profile_devices(spec: str, flag: str = "--devices", runs: bool = True):
    """(cpu_devices, gpus) for `cpu:K` or `gpu`: where a profile (or a measurement)
    runs; `gpu` only where TensorFlow sees one when anything `runs` there (else the
    step would run, and be timed, on the CPU)."""
    text = str(spec).strip().lower()
    if text == "gpu":
        if runs and not tf.config.list_physical_devices("GPU"):
            raise UserError(f"{flag}: gpu: TensorFlow sees no GPU here; give cpu:K")
        return 1, True
    match = re.fullmatch(r"cpu:([0-9]+)", text)
    if not match or not 1 <= int(match.group(1)) <= MAX_DEVICES:
        raise UserError(f"{flag}: expected cpu:K (1 <= K <= {MAX_DEVICES}) or gpu, got {spec!r}")
    return int(match.group(1)), False
