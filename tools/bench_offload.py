"""The largest GPT-style model that fits a DGX H100's GPUs, with and without the host as a
device (issue 41; docs/benchmarks.md, "Offload to the host").

For each cluster of `--configs` (default dgx-h100:1, dgx-h100:2, dgx-h100, each without
and with `+host`), bisects the number of decoder blocks of tools/gpt_model.py's GPT
(d = 4096, 32 heads, sequence 1024, batch 1, vocabulary 32768, Adam in float32),
planned shape-only with `estimate="dgx-h100"`, for the largest model that
`--algorithm pardnn` places within memory with every compute-bound op (MatMul,
BatchMatMul: pardnn.graph.op_rates) on the GPUs. (The host alone, 2 TiB, could hold
any of these models and run all of it on its CPUs: a model counts as fitting when the
host serves as memory and for the optimizer's updates and element-wise ops, as in
ZeRO-Offload, and the GPUs do the model's arithmetic.) Prints per cluster the largest fitting
model (blocks, parameters), the smallest that did not fit, its emulated step, the share
of the step during which a transfer to or from the host is in flight, the bytes that
cross to and from the host per step, and how long planning and placing took.
`--host-fetch` places each graph with the host-fetch lever (issue 51;
pardnn.pipeline.host_fetch): the weights read again for the backward pass and every
read held back by control edges until just before its layer; `--recompute N` tries the
first N recomputations of each graph (pardnn.pipeline.recompute), the first that fits
kept (without it, none: the placements are made with `recompute="off"`); `--start B`
is the first block count tried.

    python -m tools.bench_offload [--work DIR] [--configs A,B,...] [--resolution N]
                                  [--host-fetch] [--recompute N] [--start B]

Each plan (a profile dir per block count, kept in `--work` and reused by every
cluster) and each placement runs in a child process, one at a time; planning and
placing a 100k-node graph take minutes and GBs of memory each, so run it under `nice`
on a shared machine. The search starts from a guess by bytes per block, or for a
cluster with the host at twice the largest block count found without it (the
target), grows by STEP until a size fails, then bisects until the fitting and the
failing counts are at most `--resolution` of the fitting one apart (default 0: the
exact largest).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from tools.commit_line import print_commit

DEFAULT_CONFIGS = ("dgx-h100:1", "dgx-h100:1+host", "dgx-h100:2", "dgx-h100:2+host", "dgx-h100", "dgx-h100+host")
# First guesses, bytes per block: its float32 weights, two Adam slots and the activations
# it holds at the step's peak (2.42 + 0.57 GB, measured on 8 blocks); with the host, the
# GPUs hold the weights' copies and the activations (0.81 + 0.57 GB).
# With --host-fetch, the GPU holds the activations and a few weights' copies (0.6 GB).
BYTES_PER_BLOCK, BYTES_PER_BLOCK_HOST, BYTES_PER_BLOCK_FETCH = 3.0e9, 1.4e9, 0.6e9
STEP = 0.08         # growth of the probe while no size has failed yet

PLAN = r'''
import json, sys, time, resource
import keras, tensorflow as tf
import pardnn.tf
from tools import gpt_model
blocks, out = int(sys.argv[1]), sys.argv[2]
t0 = time.perf_counter()
keras.backend.clear_session()
with pardnn.tf.shape_only_variables():
    model, opt, step = gpt_model.build(blocks)
spec = tf.TensorSpec([1024], tf.int32)
doc = pardnn.tf.profile_function(step, (spec, spec), out_dir=out, estimate="dgx-h100")
facts = {"parameters": sum(v.shape.num_elements() for v in model.trainable_variables),
         "plan_seconds": time.perf_counter() - t0,
         "plan_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
with open(out + ".json", "w") as f:
    json.dump(facts, f)
print(json.dumps(facts))
'''


def plan(work, blocks) -> tuple:
    """(profile dir, facts) of the `blocks`-block GPT, planned in a child process unless
    it is there; facts: its parameters, and the plan's seconds and peak RSS."""
    out = os.path.join(work, f"gpt-{blocks}")
    if not os.path.exists(out + ".json"):
        _child(["-c", PLAN, str(blocks), out])
    with open(out + ".json") as f:
        return out, json.load(f)


def place_child(profile, spec, fetch=False, recompute=0) -> dict:
    """What the `--place` child prints: place `profile` on `spec` with pardnn (with
    the host-fetch lever when `fetch`); with `recompute` > 0, each of the first
    `recompute` recomputations (pardnn.pipeline.recompute.recomputations) in turn
    instead, until one fits."""
    import itertools
    import resource

    from pardnn.hardware import parse_devices
    from pardnn.pipeline.load import load_cost_graph
    from pardnn.pipeline.recompute import recomputations
    graph, _ = load_cost_graph(profile)
    cluster = parse_devices(spec)
    t0 = time.perf_counter()
    graphs = itertools.islice((r.graph for r in recomputations(graph)), recompute) if recompute else [graph]
    result = {"fits": False, "nodes": graph.num_nodes, "reason": "no recomputation"}
    for tried, g in enumerate(graphs, 1):
        if fetch:
            from pardnn.pipeline.host_fetch import host_fetch
            g = host_fetch(g).graph
        result = {**_placed(g, cluster), "recomputations_tried": tried * bool(recompute)}
        if result["fits"]:
            break
    return {**result, "seconds": time.perf_counter() - t0,
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _placed(graph, cluster) -> dict:
    """`place_child`'s figures for one graph."""
    from pardnn.base.errors import UserError
    from pardnn.graph.op_rates import COMPUTE
    from pardnn.pipeline.place import place
    try:
        placement, report = place(graph, cluster, recompute="off")
    except UserError as exc:
        return {"fits": False, "nodes": graph.num_nodes, "reason": str(exc)[:300]}
    share, crossing = host_transfers(graph, cluster, placement.device, placement.schedule)
    on_host = np.asarray([d.host_tier for d in cluster.devices])[placement.device]
    arithmetic = int(np.count_nonzero(on_host & (graph.rate_class == COMPUTE)))
    return {"fits": arithmetic == 0, "host_matmuls": arithmetic, "nodes": graph.num_nodes,
            "makespan_us": report.makespan_us, "host_share": share, "host_bytes": crossing,
            "candidate": report.candidate, "moved_nodes": report.moved_nodes,
            "peak_gib": [round(x / 2**30, 2) for x in report.peak_memory_bytes],
            "peak_parts": peak_parts(graph, cluster, placement.device, placement.schedule)}


def peak_parts(graph, cluster, device, schedule) -> dict:
    """GB by kind of what fills the first GPU at its peak: "weights" (copies of
    variable reads received from the host), "activations" (forward outputs and other
    copies received), "backward" (gradients, their temporaries), "resident"
    (variables and slots kept on the GPU), "scratch"."""
    from pardnn.emulator.memory import track_memory
    from pardnn.graph.passes import backward_pass
    profile = track_memory(graph, cluster, device, schedule)
    t = profile.peak_time_us[0]
    live = (profile.buf_device == 0) & (profile.buf_alloc <= t) & (t < profile.buf_free)
    node, nbytes = profile.buf_node[live], profile.buf_bytes[live]
    received = np.asarray(device)[node] != 0
    read = np.array([graph.ops[n] == "ReadVariableOp" for n in node.tolist()], bool)
    back = backward_pass(graph)[node]
    running = (np.asarray(device) == 0) & (schedule.start <= t) & (t < schedule.finish)
    gb = {"weights": nbytes[received & read].sum(), "activations": nbytes[~read & ~back].sum(),
          "backward": nbytes[~read & back].sum(), "resident": profile.resident_bytes[0],
          "scratch": graph.temp_bytes[running].sum()}
    return {k: round(float(v) / 1e9, 2) for k, v in gb.items()}


def host_transfers(graph, cluster, device, schedule) -> tuple:
    """(share, bytes): the part of the step during which a transfer to or from the host
    device is in flight (the union of their intervals over the step), and the bytes
    they carry; (0.0, 0) on a cluster without a host."""
    h = cluster.host_device
    if h < 0 or len(schedule.transfer_edge) == 0:
        return 0.0, 0
    src = np.asarray(device)[graph.edge_src[schedule.transfer_edge]]
    mine = (schedule.transfer_dst == h) | (src == h)
    send, arrive = schedule.transfer_send[mine], schedule.transfer_arrival[mine]
    order = np.argsort(send, kind="stable")
    busy, end = 0.0, -np.inf
    for s, a in zip(send[order].tolist(), arrive[order].tolist()):
        if a > end:
            busy += a - max(s, end)
            end = a
    return busy / schedule.makespan, int(schedule.transfer_bytes[mine].sum())


def fits(work, blocks, spec, log, fetch=False, recompute=0) -> dict:
    profile, facts = plan(work, blocks)
    result = json.loads(_child(["-m", "tools.bench_offload", "--place", profile, spec]
                               + ["--host-fetch"] * fetch + ["--recompute", str(recompute)]))
    result.update(facts, blocks=blocks)
    log.append(result)
    why = "" if result["fits"] else (f", {result['host_matmuls']} MatMuls on the host" if "host_matmuls" in result
                                     else f": {result['reason'][:120]}")
    print(f"  {spec}: {blocks} blocks, {result['nodes']} nodes: "
          f"{'fits' if result['fits'] else 'does not fit'}{why} ({result['seconds']:.0f} s)", flush=True)
    return result


def largest(work, spec, resolution, start=None, fetch=False, recompute=0) -> tuple:
    """(largest fitting result, smallest failing block count) for cluster `spec`,
    searched from `start` blocks (None: a guess by bytes per block)."""
    from pardnn.hardware import parse_devices
    cluster = parse_devices(spec)
    host = BYTES_PER_BLOCK_FETCH if fetch else BYTES_PER_BLOCK_HOST
    per_block = host if cluster.host_device >= 0 else BYTES_PER_BLOCK
    gpus = cluster.capacity[np.asarray([not d.host_tier for d in cluster.devices])]
    probe = start or max(1, int(gpus.sum() / per_block))
    log, good, bad = [], None, None
    while True:
        result = fits(work, probe, spec, log, fetch, recompute)
        good, bad = (result, bad) if result["fits"] else (good, probe)
        lo = good["blocks"] if good else 0
        if bad is not None and (bad - lo <= max(1, resolution * lo) or bad == 1):
            return good, bad
        if bad is None:
            probe = max(lo + 1, int(lo * (1 + STEP)))
        elif good is None:
            probe = max(1, int(bad * (1 - STEP)))
        else:
            probe = (lo + bad) // 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/tmp/bench_offload")
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    parser.add_argument("--resolution", type=float, default=0.0,
                        help="stop when failing - fitting <= this share of the fitting block count")
    parser.add_argument("--host-fetch", action="store_true",
                        help="place with the host-fetch lever (pardnn.pipeline.host_fetch)")
    parser.add_argument("--recompute", type=int, default=0, metavar="N",
                        help="try the first N recomputations of each graph (default 0: none)")
    parser.add_argument("--start", type=int, help="the first block count to try (default: a guess)")
    parser.add_argument("--place", nargs=2, metavar=("PROFILE", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.place:
        print(json.dumps(place_child(*args.place, args.host_fetch, args.recompute)))
        return
    print_commit()
    os.makedirs(args.work, exist_ok=True)
    rows, found = [], {}
    for spec in args.configs.split(","):
        alone = spec[:-len("+host")] if spec.endswith("+host") else None
        start = 2 * found[alone] if found.get(alone) and not args.host_fetch else None
        good, bad = largest(args.work, spec, args.resolution, args.start or start, args.host_fetch,
                            args.recompute)
        found[spec] = good["blocks"] if good else None
        rows.append((spec, good, bad))
    print("cluster | blocks | parameters | fails at | emulated step | host transfers | host bytes/step | "
          "nodes | plan s, RSS | place s, RSS | GPU peak, GB")
    for spec, good, bad in rows:
        if good is None:
            print(f"{spec} | none fits | | {bad} | | | | | |")
            continue
        print(f"{spec} | {good['blocks']} | {good['parameters'] / 1e9:.2f} B | {bad} | "
              f"{good['makespan_us'] / 1e6:.3f} s | {good['host_share']:.0%} | {good['host_bytes'] / 1e9:.1f} GB | "
              f"{good['nodes']} | {good['plan_seconds']:.0f}, {good['plan_rss_mib'] / 1024:.1f} GiB | "
              f"{good['seconds']:.0f}, {good['rss_mib'] / 1024:.1f} GiB | "
              + ", ".join(f"{k} {v}" for k, v in good["peak_parts"].items()))


def _child(argv) -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=root)
    if proc.returncode:
        sys.exit(f"child {argv[:2]} failed: {proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


if __name__ == "__main__":
    main()
