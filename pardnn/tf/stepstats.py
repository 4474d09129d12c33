"""RunMetadata step_stats -> per-node median compute time and per-slot output bytes.

Each run_metadata_<i>.pb is one traced step. A node's time in a step is the
`all_end_rel` duration of its record (nanoseconds when TF gives them, else
microseconds); when it has several records in one step — on GPU, the launch on
`/device:GPU:0` and the kernel on `.../stream:all` and its stream — the longest
counts, so the kernel time is not added to its own launch. The node's cost is the
median over steps of those per-step times (steps where it did not run are left
out of its median).

Names in step_stats are mapped back to GraphDef nodes: an exact match; a fed
placeholder appears as `_arg_<name>_<slot>_<index>`; GPU stream records may read
`name:OpType`. Records TF adds itself (`_SOURCE`, `_SINK`, `_retval_*`, send/recv
and replicated constants named `.../_<n>`) are skipped. When most remaining names
are unknown, the RunMetadata belongs to another graph: UserError naming the file.

Output bytes per slot are the largest `requested_bytes` seen over steps; a node's
scratch memory is the largest `memory_stats.temp_memory_size` seen over steps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError

from pardnn.errors import UserError
from pardnn.tf.protos import RunMetadata

_ARG = re.compile(r"_arg_(.+)_\d+_\d+")
_INTERNAL = re.compile(r"_|.*/_\d+$")
MAX_UNKNOWN_FRACTION = 0.5


@dataclass
class StepStats:
    comp_us: np.ndarray          # float64 per node, 0 where never timed
    timed: np.ndarray            # bool per node: seen in at least one step
    slot_bytes: np.ndarray       # int64 per global slot, -1 where never measured
    temp_bytes: np.ndarray       # int64 per node: largest scratch memory over steps
    unknown_records: int         # records whose name matched no node


def read_step_stats(paths, table) -> StepStats:
    """Median times and measured slot sizes over the traced steps in `paths`."""
    n = table.num_nodes
    times = np.full((len(paths), n), np.nan)
    slot_bytes = np.full(int(table.slot_ptr[-1]), -1, np.int64)
    temp = np.zeros(n, np.int64)
    unknown = 0
    for step, path in enumerate(paths):
        ids, us, scratch, outs, bad = _records(path, table)
        np.fmax.at(times[step], ids, us)
        np.maximum.at(temp, ids, scratch)
        if len(outs):
            np.maximum.at(slot_bytes, outs[:, 0], outs[:, 1])
        unknown += bad
    timed = ~np.all(np.isnan(times), axis=0)
    comp = np.zeros(n)
    if timed.any():
        comp[timed] = np.nanmedian(times[:, timed], axis=0)
    return StepStats(comp, timed, slot_bytes, temp, unknown)


def _records(path, table):
    """(node ids, durations in us, scratch bytes, [[global slot, bytes]], unknown count)
    of one step.

    A tight loop over the protobuf records (a 200k-node step has 200k of them);
    slot bookkeeping is done afterwards on arrays."""
    meta = _parse(path)
    index = table.index
    get = index.get
    ids, us, scratch, out_node, out_slot, out_size = [], [], [], [], [], []
    unknown = 0
    for dev in meta.step_stats.dev_stats:
        for ns in dev.node_stats:
            name = ns.node_name
            i = get(name)
            if i is None:
                i = _resolve(name, index)
                if i is None:
                    unknown += not _INTERNAL.match(name)
                    continue
            ids.append(i)
            nanos = ns.all_end_rel_nanos
            us.append(nanos / 1e3 if nanos else ns.all_end_rel_micros)
            scratch.append(ns.memory_stats.temp_memory_size)
            for out in ns.output:
                out_node.append(i)
                out_slot.append(out.slot)
                out_size.append(out.tensor_description.allocation_description.requested_bytes)
    if not ids and not unknown:
        raise UserError(f"{path}: no step_stats (trace the step with RunOptions(trace_level=FULL_TRACE))")
    if unknown > MAX_UNKNOWN_FRACTION * (unknown + len(ids)):
        raise UserError(f"{path}: {unknown} of {unknown + len(ids)} step_stats nodes are not in graph.pb "
                        f"(RunMetadata from another graph?)")
    node, slot, size = (np.asarray(x, np.int64) for x in (out_node, out_slot, out_size))
    nslots = table.slot_ptr[node + 1] - table.slot_ptr[node]
    ok = (slot >= 0) & (slot < nslots) & (size > 0)
    outs = np.stack([table.slot_ptr[node[ok]] + slot[ok], size[ok]], axis=1)
    return np.asarray(ids, np.int64), np.asarray(us, float), np.asarray(scratch, np.int64), outs, unknown


def _resolve(name, index):
    """GraphDef node id of a step_stats record name that is not a node name, or None."""
    match = _ARG.fullmatch(name)
    if match:
        return index.get(match.group(1))
    if ":" in name:
        return index.get(name.partition(":")[0])
    return None


def _parse(path):
    meta = RunMetadata()
    try:
        with open(path, "rb") as f:
            meta.ParseFromString(f.read())
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    except (DecodeError, RuntimeError, ValueError):
        raise UserError(f"{path}: not a serialized RunMetadata (truncated or another format)") from None
    return meta
