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

Control flow: TF 2.x builds `tf.while_loop` and `tf.cond` (in TF1-style graphs too)
as one functional node (While, If, their Stateless forms, Case, a function call)
whose body the session lowers into nodes of its own, named under the node's name
(`while/body/_1/while/MatMul`). Those records are charged to that node: its time in
a step is its own longest record plus the time its body ran (every iteration's
records, summed per device and the busiest device's sum taken, so a GPU kernel is
not counted again on its launch device), and its scratch memory the largest of the
body's. The body's intermediate outputs are not counted as memory.

Output bytes per slot are the largest `requested_bytes` seen over steps; a node's
scratch memory is the largest `memory_stats.temp_memory_size` seen over steps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError

from pardnn.base.errors import UserError
from pardnn.tf.graphdef import FUNCTIONAL_OPS
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
    calls = {i for i, op in enumerate(table.ops) if op in FUNCTIONAL_OPS}
    for step, path in enumerate(paths):
        ids, us, scratch, outs, bad, body = _records(path, table, calls)
        np.fmax.at(times[step], ids, us)
        np.maximum.at(temp, ids, scratch)
        for i, (body_us, body_scratch) in body.items():
            times[step, i] = np.nan_to_num(times[step, i]) + body_us
            temp[i] = max(temp[i], body_scratch)
        if len(outs):
            np.maximum.at(slot_bytes, outs[:, 0], outs[:, 1])
        unknown += bad
    timed = ~np.all(np.isnan(times), axis=0)
    comp = np.zeros(n)
    if timed.any():
        comp[timed] = np.nanmedian(times[:, timed], axis=0)
    return StepStats(comp, timed, slot_bytes, temp, unknown)


def _records(path, table, calls=frozenset()):
    """(node ids, durations in us, scratch bytes, [[global slot, bytes]], unknown count,
    {functional node id: (its body's time in us, its body's largest scratch)}) of one
    step; `calls`, the ids of the nodes whose ops are FUNCTIONAL_OPS.

    A tight loop over the protobuf records (a 200k-node step has 200k of them);
    slot bookkeeping is done afterwards on arrays."""
    meta = _parse(path)
    index = table.index
    get = index.get
    ids, us, scratch, out_node, out_slot, out_size = [], [], [], [], [], []
    unknown, body = 0, {}
    for dev in meta.step_stats.dev_stats:
        here = {}
        for ns in dev.node_stats:
            name = ns.node_name
            i = get(name)
            if i is None:
                i = _resolve(name, index)
                if i is None:
                    if _INTERNAL.match(name):
                        continue
                    call = _enclosing_call(name, index, calls) if calls else None
                    if call is None:
                        unknown += 1
                    else:
                        t, most = here.get(call, (0.0, 0))
                        here[call] = (t + _duration_us(ns), max(most, ns.memory_stats.temp_memory_size))
                    continue
            ids.append(i)
            us.append(_duration_us(ns))
            scratch.append(ns.memory_stats.temp_memory_size)
            for out in ns.output:
                out_node.append(i)
                out_slot.append(out.slot)
                out_size.append(out.tensor_description.allocation_description.requested_bytes)
        for call, (t, most) in here.items():         # the busiest device's sum (see "Control flow")
            before = body.get(call, (0.0, 0))
            body[call] = (max(before[0], t), max(before[1], most))
    if not ids and not unknown and not body:
        raise UserError(f"{path}: no step_stats (trace the step with RunOptions(trace_level=FULL_TRACE))")
    if unknown > MAX_UNKNOWN_FRACTION * (unknown + len(ids)):
        raise UserError(f"{path}: {unknown} of {unknown + len(ids)} step_stats nodes are not in graph.pb "
                        f"(RunMetadata from another graph?)")
    node, slot, size = (np.asarray(x, np.int64) for x in (out_node, out_slot, out_size))
    nslots = table.slot_ptr[node + 1] - table.slot_ptr[node]
    ok = (slot >= 0) & (slot < nslots) & (size > 0)
    outs = np.stack([table.slot_ptr[node[ok]] + slot[ok], size[ok]], axis=1)
    return np.asarray(ids, np.int64), np.asarray(us, float), np.asarray(scratch, np.int64), outs, unknown, body


def _duration_us(ns) -> float:
    nanos = ns.all_end_rel_nanos
    return nanos / 1e3 if nanos else ns.all_end_rel_micros


def _enclosing_call(name, index, calls):
    """The functional node (id in `calls`) whose lowered body ran the node `name`: the
    longest of its '/'-separated prefixes that names one; or None."""
    parts = name.split("/")
    for end in range(len(parts) - 1, 0, -1):
        i = index.get("/".join(parts[:end]))
        if i is not None and i in calls:
            return i
    return None


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
