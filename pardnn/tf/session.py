"""The session configuration pardnn profiles and runs graphs with.

Graph rewriting is switched off: grappler's meta optimizer and the classic graph
optimizer's constant folding, common-subexpression elimination and function
inlining. They fuse, fold and rename nodes (MatMul+BiasAdd+Relu become one node
named after the Relu; folded constants get new names), so with them on, a profile
would time nodes the GraphDef does not contain and a placement check would find the
requested nodes gone. With them off, every GraphDef node is timed and run as itself,
which is what the cost graph describes. Training code that imports a placed graph
may use any configuration it likes: grappler keeps device assignments.

Soft placement is on, so a node TF cannot run where asked is moved rather than
failing the run; `pardnn.tf.rewrite.check_placement` reports every such move.
"""

import re

import tensorflow as tf

from pardnn.errors import UserError

tf1 = tf.compat.v1


def session_config(cpu_devices: int = 1, gpus: bool = False):
    """ConfigProto with `cpu_devices` virtual CPU devices; GPUs hidden unless `gpus`."""
    count = {"CPU": int(cpu_devices)}
    if not gpus:
        count["GPU"] = 0
    config = tf1.ConfigProto(device_count=count, allow_soft_placement=True)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    opts = config.graph_options.optimizer_options
    opts.opt_level = tf1.OptimizerOptions.L0
    opts.do_constant_folding = False
    opts.do_common_subexpression_elimination = False
    opts.do_function_inlining = False
    return config


def parse_profile_devices(spec: str, flag: str = "--devices"):
    """(cpu_devices, gpus) for `cpu:K` or `gpu`: where a profile runs."""
    text = str(spec).strip().lower()
    if text == "gpu":
        return 1, True
    match = re.fullmatch(r"cpu:([0-9]+)", text)
    if not match or int(match.group(1)) < 1:
        raise UserError(f"{flag}: expected cpu:K (K >= 1) or gpu, got {spec!r}")
    return int(match.group(1)), False
