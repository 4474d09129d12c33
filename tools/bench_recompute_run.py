"""A memory lever in a real run: what TF's allocator holds with and without it (issue 51).

    python -m tools.bench_recompute_run [--family mlp] [--size small] [--set k=v ...]
        [--devices 2] [--config pardnn|default|none] [--lever recompute|order|host-fetch]
        [--min-bytes B] [--dir DIR]

Profiles a built-in family (`pardnn profile`), places it round-robin on cpu:K, then
runs one step of the placed graph twice on K virtual CPU devices: as placed, and with
the lever written into placed_graph.pb by pardnn.tf.placed_graph, every op on its
placed device. `recompute`: the recomputation the planner ranks first
(pardnn.pipeline.recompute), each copy on its original's device. `order`: the first
order the order lever proposes (pardnn.pipeline.order_lever.ordered_graphs: the big
gradient sums one after another), as `^before` control inputs. `host-fetch`: the
profile placed with every group holding variables on the last device (a host tier,
as the memory repair leaves it) and the rest on device 0, then the host-fetch lever
(pardnn.pipeline.host_fetch: each weight read of `--min-bytes` or more read again for
the backward pass, the reads ordered two apart); TF hands a tensor from one CPU
device to another without a copy, so device 0's allocator never holds the weights
that the emulator counts there, and only the losses and the second reads tell (config none:
tf.compat.v1.Session's own ConfigProto, one CPU device). For both it prints the first
loss (and the unplaced model's), the ops TF moved, the copies that ran (recompute),
and per device the allocator's peak over the step
(pardnn.tf.allocations, FULL_TRACE) beside the emulator's (pardnn.emulator.memory's
peak less what is resident: variables and slots, which the allocator's records of one
step leave out). On one device the measured peaks repeat exactly; on two, TF's
executor orders the devices' ready ops differently from run to run (`measured`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

import numpy as np

from tools.commit_line import print_commit


def recomputed_device(device, done):
    """Device per node of the recomputed graph: each node's of `device` (per node of
    the graph it was made from), each copy its original's."""
    out = np.zeros(len(done.new_id) + len(done.copies), np.int32)
    out[done.new_id] = device
    out[done.copies] = out[done.originals]
    return out


def emulated_peaks(graph, cluster, device) -> list:
    """Per device, the emulator's peak bytes less the resident ones."""
    from pardnn.emulator.memory import track_memory
    from pardnn.emulator.scheduler import simulate
    memory = track_memory(graph, cluster, device, simulate(graph, cluster, device))
    return (memory.peak_bytes - memory.resident_bytes).tolist()


def measured(placed_dir, config, copies=()) -> dict:
    """One traced step of placed_dir's graph, checked as pardnn.tf.rewrite.check_placement
    checks it, in a session of `config` (pardnn.tf.session.SESSION_CONFIGS) whose ops
    all run in the calling thread (RunOptions.inter_op_thread_pool -1, one intra-op
    thread): with a pool, the order the executor runs ready ops in, and so the peaks,
    change from run to run (measured: 0.72 to 1.33 MB on one device). First loss,
    moved ops, measured peak per device (in device order), the ops that ran and which
    of `copies` did."""
    import json
    import tensorflow as tf
    from pardnn.models import build_model
    from pardnn.tf.allocations import HOST, step_peaks
    from pardnn.tf.graphdef import read_graph_def
    from pardnn.tf.rewrite import compare_partitions, import_placed_graph
    from pardnn.tf.run import device_counts
    from pardnn.tf.session import SESSION_CONFIGS
    from pardnn_builtin_models import load_module
    with open(os.path.join(placed_dir, "profile.json")) as f:
        doc = json.load(f)
    model = build_model(load_module(doc["model"]), doc["model"], doc.get("knobs", {}))
    graph_def = read_graph_def(os.path.join(placed_dir, "placed_graph.pb"))
    if config is None:                  # TF's own ConfigProto, nothing set (one CPU device)
        config = tf.compat.v1.ConfigProto()
    else:
        config = SESSION_CONFIGS[config](*device_counts(graph_def))
        config.intra_op_parallelism_threads = 1
    graph = tf.Graph()
    with graph.as_default():
        import_placed_graph(graph_def)
    tf1 = tf.compat.v1
    with tf1.Session(graph=graph, config=config) as session:
        session.run(model.init)
        metadata = tf1.RunMetadata()
        options = tf1.RunOptions(output_partition_graphs=True, trace_level=tf1.RunOptions.FULL_TRACE,
                                 inter_op_thread_pool=-1)
        _, loss = session.run([model.train_op, model.loss], model.feed(0) if model.feed else None,
                              options=options, run_metadata=metadata)
    moved = compare_partitions({n.name: n.device for n in graph_def.node}, metadata.partition_graphs).moved
    ran = {n.node_name for d in metadata.step_stats.dev_stats for n in d.node_stats}
    peaks = [peak for device, peak in sorted(step_peaks(metadata.step_stats).items()) if device != HOST]
    return {"loss": float(loss), "moved": moved, "peaks": peaks, "ran": ran,
            "copies_ran": sorted(c for c in copies if c in ran)}


def unplaced_loss(placed_dir) -> float:
    """The first loss of the model placed_dir's profile.json names, built and trained
    as it is (its own graph, no placement, pardnn's session config)."""
    import json
    import tensorflow as tf
    from pardnn.models import build_model
    from pardnn.tf.session import session_config
    from pardnn_builtin_models import load_module
    with open(os.path.join(placed_dir, "profile.json")) as f:
        doc = json.load(f)
    model = build_model(load_module(doc["model"]), doc["model"], doc.get("knobs", {}))
    with tf.compat.v1.Session(graph=model.graph, config=session_config()) as session:
        session.run(model.init)
        _, loss = session.run([model.train_op, model.loss], model.feed(0) if model.feed else None)
    return float(loss)


def profile(root, family, size, knobs) -> str:
    """The profile dir of `family` profiled (`pardnn profile`) under `root`."""
    from pardnn.cli import main
    prof = os.path.join(root, "prof")
    sets = [arg for kv in knobs for arg in ("--set", kv)]
    assert main(["profile", family, "--size", size, "--steps", "1", *sets, "-o", prof]) == 0
    return prof


def place(prof, root, k):
    """(placed dir, CostGraph, Cluster, device): `prof` placed round-robin on cpu:k."""
    from pardnn.cli import main
    from pardnn.hardware import parse_devices
    from pardnn.io.placement import read_csv
    from pardnn.pipeline.load import load_cost_graph
    placed = os.path.join(root, f"placed{k}")
    assert main(["place", prof, "--devices", f"cpu:{k}", "--algorithm", "round-robin", "-o", placed]) == 0
    graph, _ = load_cost_graph(prof)
    cluster = parse_devices(f"cpu:{k}")
    return placed, graph, cluster, read_csv(os.path.join(placed, "placement.csv"), graph, cluster)


def write_recomputed(prof, placed, graph, cluster, device, out_dir, recomputation=None):
    """(recomputed graph, its device, copy names): the planner's first recomputation
    of `graph` (or `recomputation`) written as out_dir/placed_graph.pb beside a copy
    of placed's profile.json."""
    from pardnn.io.placement import Placement
    from pardnn.pipeline.recompute import recomputations
    from pardnn.tf.placed_graph import write_placed_graph
    rec = recomputation or next(iter(recomputations(graph)))
    new_device = recomputed_device(device, rec.done)
    os.makedirs(out_dir, exist_ok=True)
    shutil.copy(os.path.join(placed, "profile.json"), out_dir)
    write_placed_graph(prof, rec.graph, Placement(new_device, cluster), os.path.join(out_dir, "placed_graph.pb"))
    return rec.graph, new_device, [rec.graph.names[c] for c in rec.done.copies.tolist()]


def write_ordered(prof, placed, graph, cluster, device, out_dir):
    """(ordered graph, its device, the order's edge count): the first order the order
    lever proposes for `graph`, written as out_dir/placed_graph.pb (`device`, the
    order's edges as control inputs) beside a copy of placed's profile.json."""
    from pardnn.io.placement import Placement
    from pardnn.pipeline.order_lever import ordered_graphs
    from pardnn.tf.placed_graph import write_placed_graph
    proposed = ordered_graphs(graph)
    if not proposed:
        raise SystemExit("the order lever proposes no order for this graph: FIFO piles nothing up that it unpiles")
    ordered = proposed[0]
    os.makedirs(out_dir, exist_ok=True)
    shutil.copy(os.path.join(placed, "profile.json"), out_dir)
    write_placed_graph(prof, graph, Placement(device, cluster), os.path.join(out_dir, "placed_graph.pb"),
                       order=ordered.order)
    new_device = np.empty(len(device), np.int32)
    new_device[ordered.ids] = device
    return ordered.graph, new_device, len(ordered.order)


def host_placed(prof, root, graph, cluster):
    """(placed dir, device): `prof` with every colocation group that holds resident
    state (variables, their slots and updates) on the last device, as the memory
    repair puts them on a host tier, and the rest on device 0, written as placed_graph.pb."""
    from pardnn.graph.node_memory import resident_bytes
    from pardnn.io.placement import Placement
    from pardnn.tf.placed_graph import write_placed_graph
    held = np.bincount(graph.group, resident_bytes(graph), graph.num_groups) > 0
    device = np.where(held[graph.group], cluster.num_devices - 1, 0).astype(np.int32)
    placed = os.path.join(root, "host_placed")
    os.makedirs(placed, exist_ok=True)
    shutil.copy(os.path.join(prof, "profile.json"), placed)
    write_placed_graph(prof, graph, Placement(device, cluster), os.path.join(placed, "placed_graph.pb"))
    return placed, device


def write_host_fetched(prof, placed, graph, cluster, device, out_dir, min_bytes):
    """(the lever's graph, its device, second reads): the host-fetch lever
    (pardnn.pipeline.host_fetch) on `graph` for reads of `min_bytes` or more, each
    second read on its first's device, written as out_dir/placed_graph.pb with the
    fetch order's edges beside a copy of placed's profile.json."""
    from pardnn.io.placement import Placement
    from pardnn.pipeline.host_fetch import host_fetch
    from pardnn.tf.placed_graph import write_placed_graph
    lever = host_fetch(graph, min_bytes=min_bytes)
    refetched = recomputed_device(device, lever.refetch)
    os.makedirs(out_dir, exist_ok=True)
    shutil.copy(os.path.join(placed, "profile.json"), out_dir)
    write_placed_graph(prof, lever.refetched, Placement(refetched, cluster), os.path.join(out_dir, "placed_graph.pb"),
                       order=lever.order)
    on_graph = np.empty(lever.graph.num_nodes, np.int32)
    on_graph[lever.ids] = refetched
    return lever.graph, on_graph, [lever.refetched.names[c] for c in lever.refetch.copies.tolist()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="mlp")
    parser.add_argument("--size", default="small")
    parser.add_argument("--set", action="append", default=[], dest="knobs")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--config", default="pardnn", choices=["pardnn", "default", "none"])
    parser.add_argument("--lever", default="recompute", choices=["recompute", "order", "host-fetch"])
    parser.add_argument("--min-bytes", type=int, default=4096,
                        help="host-fetch: the least bytes of a weight read again (default 4096)")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    print_commit()
    root = args.dir or tempfile.mkdtemp(prefix="bench_recompute_")
    prof = profile(root, args.family, args.size, args.knobs)
    if args.lever == "host-fetch":
        from pardnn.hardware import parse_devices
        from pardnn.pipeline.load import load_cost_graph
        graph, _ = load_cost_graph(prof)
        cluster = parse_devices(f"cpu:{max(args.devices, 2)}")
        placed, device = host_placed(prof, root, graph, cluster)
    else:
        placed, graph, cluster, device = place(prof, root, args.devices)
    if args.lever == "host-fetch":
        new, new_device, copies = write_host_fetched(prof, placed, graph, cluster, device, placed + "_lever",
                                                     args.min_bytes)
        lever, what = "fetched", f"{len(copies)} weights read again for the backward pass"
    elif args.lever == "recompute":
        new, new_device, copies = write_recomputed(prof, placed, graph, cluster, device, placed + "_lever")
        lever, what = "recomputed", f"{len(copies)} ops recomputed"
    else:
        new, new_device, edges = write_ordered(prof, placed, graph, cluster, device, placed + "_lever")
        copies, lever, what = [], "ordered", f"an order of {edges} control edges"
    config = None if args.config == "none" else args.config
    runs = {"plain": (measured(placed, config), emulated_peaks(graph, cluster, device)),
            lever: (measured(placed + "_lever", config, copies), emulated_peaks(new, cluster, new_device))}
    print(f"{args.family} --size {args.size} {' '.join(args.knobs)} on cpu:{args.devices}, config "
          f"{args.config}: {what}; unplaced first loss {unplaced_loss(placed):.8g}")
    print("run         first loss    moved  copies ran  measured peak per device   emulated peak per device")
    for name, (run, emulated) in runs.items():
        ran = f"{len(run['copies_ran'])}/{len(copies)}" if name != "plain" and copies else "-"
        print(f"{name:<11} {run['loss']:<13.8g} {len(run['moved']):<6} {ran:<11} "
              f"{str(run['peaks']):<26} {emulated}")


if __name__ == "__main__":
    main()
