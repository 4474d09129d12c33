"""CostGraph: the dataflow graph with profiled costs, as arrays over int ids.

Nodes are numbered 0..n-1 in a topological order (thesis §4.1: ParDNN works on a
DAG; TF1 loop back edges are dropped by the loader before a CostGraph is built).
Per node: name, op, comp_us (median measured compute time), out_bytes (bytes of all
outputs), persist_bytes (state that survives iterations), kind (NORMAL, RESIDUAL or
REFERENCE, thesis §4.1.2 "Tracking Memory Consumption"), group (colocation group id:
nodes of one group must share a device) and pinned (a device kind such as "CPU" the
node must run on, or "" for none).

Edges are stored in CSR form both ways. Edge ids are positions in the successor
CSR, so `succ_ptr[u]:succ_ptr[u+1]` are the ids of u's out-edges; `pred_eid` maps the
predecessor CSR back to edge ids. Each edge carries `edge_bytes` (size of the tensor,
0 for a control edge) and `edge_slot` (the producer's output index, -1 for control),
so a tensor is identified by (src, slot).

The JSON interchange format is documented in docs/costgraph-json.md.
"""

from __future__ import annotations

import heapq
import decimal
import json
import numbers
import os
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from pardnn.base.errors import GraphError
from pardnn.graph.op_rates import rate_classes
from pardnn.graph.costgraph_json import (JSON_FORMAT, JSON_VERSION, KIND_NAMES, check_header,
                                         columns_from_dict, columns_from_file, naming)
from pardnn.base.jsonfile import NotStreamable, read_json
from pardnn.base.units import MAX_SIZE, MAX_TIME_US

NORMAL, RESIDUAL, REFERENCE = 0, 1, 2       # the kinds; KIND_NAMES are their JSON names
MAX_TOTAL_BYTES = 2**62      # all bytes of a graph together (`_check_total_bytes`)


@dataclass(frozen=True, eq=False)
class CostGraph:
    """Immutable cost graph; build it with `CostGraph.build` or `CostGraph.from_json`."""

    names: tuple
    ops: tuple
    comp_us: np.ndarray
    out_bytes: np.ndarray
    persist_bytes: np.ndarray
    temp_bytes: np.ndarray      # int64 per node: scratch memory held while the op runs
    kind: np.ndarray
    group: np.ndarray
    pinned: tuple
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_bytes: np.ndarray
    edge_slot: np.ndarray
    succ_ptr: np.ndarray
    pred_ptr: np.ndarray
    pred_src: np.ndarray
    pred_eid: np.ndarray
    group_ptr: np.ndarray
    group_nodes: np.ndarray
    # What was derived from this graph for one purpose (and usually one cluster): the
    # bound on every placement's step, the exact model's solution, the complete search's
    # proofs. It lives and dies with the graph; pardnn keeps no cache at module level.
    memo: dict = field(default_factory=dict, init=False, repr=False)

    def memoized(self, key, compute):
        """compute()'s result, computed once per `key` (hashable; a Cluster keys by
        identity) for this graph."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    def __getstate__(self):
        """Pickled (to the exact model's process) without the memo, which stays here."""
        return {**self.__dict__, "memo": {}}

    # ------------------------------------------------------------------ sizes
    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @property
    def num_edges(self) -> int:
        return len(self.edge_src)

    @property
    def num_groups(self) -> int:
        return len(self.group_ptr) - 1

    # -------------------------------------------------------------- adjacency
    def successors(self, u: int) -> np.ndarray:
        return self.edge_dst[self.succ_ptr[u]:self.succ_ptr[u + 1]]

    def predecessors(self, v: int) -> np.ndarray:
        return self.pred_src[self.pred_ptr[v]:self.pred_ptr[v + 1]]

    def group_members(self, g: int) -> np.ndarray:
        return self.group_nodes[self.group_ptr[g]:self.group_ptr[g + 1]]

    def index(self) -> dict:
        """Map from node name to id (built on demand; not for hot paths)."""
        return {name: i for i, name in enumerate(self.names)}

    def total_work_us(self) -> float:
        return float(self.comp_us.sum())

    # ------------------------------------------- other forms of the adjacency, cached
    @cached_property
    def successor_arrays(self) -> tuple:
        """(succ_ptr, edge_dst) as int64 arrays, the dtype the compiled loops of levels.py
        and the emulator are compiled for."""
        return np.asarray(self.succ_ptr, np.int64), np.asarray(self.edge_dst, np.int64)

    @cached_property
    def rate_class(self) -> np.ndarray:
        """int64 per node: which of a device's rates its time scales with on a device
        of another speed (pardnn.graph.op_rates: 0 compute-bound, 1 the rest)."""
        return rate_classes(self.ops)

    # ------------------------------------------------------------ construction
    @classmethod
    def build(cls, names, ops=None, comp_us=None, out_bytes=None, persist_bytes=None,
              kind=None, group=None, pinned=None, edge_src=(), edge_dst=(),
              edge_bytes=None, edge_slot=None, temp_bytes=None) -> "CostGraph":
        """Validate the inputs and build a graph renumbered in topological order.

        `edge_src`/`edge_dst` hold node ids (ints) or node names. `group` holds any
        hashable labels; nodes sharing a label share a group; None gives each node
        its own group. Among nodes ready at once the topological order keeps the
        input order, so the same input always gives the same numbering.
        Raises GraphError on a duplicate name, a dangling edge, a negative cost or
        a cycle.
        """
        names = list(map(str, names))
        n = len(names)
        cols = _node_columns(n, ops, comp_us, out_bytes, persist_bytes, kind, pinned)
        _check_text(names, "node name")
        _check_text(cols["ops"], "op")
        cols["temp_bytes"] = _column(temp_bytes, n, np.int64, "temp bytes")
        src, dst = _edge_ids(names, edge_src, edge_dst)
        m = len(src)
        ebytes = _column(edge_bytes, m, np.int64, "edge bytes")
        _check_total_bytes(cols, ebytes)
        slots = np.zeros(m) if edge_slot is None else _numeric(edge_slot, "edge slot", whole=True).reshape(m)
        if not np.all(np.isfinite(slots)):
            raise GraphError("edge slot has a non-finite value")
        if np.any(slots < -1):
            raise GraphError(f"edge slot {int(slots.min())}: give -1 (a control edge) or an output index >= 0")
        if np.any(slots >= 2**31):
            raise GraphError(f"edge slot {slots.max():.6g}: an output index below 2**31")
        eslot = slots.astype(np.int32)
        if np.any(src == dst):
            raise GraphError(f"self-loop on node {names[int(src[src == dst][0])]!r}")
        order = _topological_order(n, src, dst, names)
        glabels = list(range(n)) if group is None else list(group)
        if len(glabels) != n:
            raise GraphError(f"group has {len(glabels)} entries for {n} nodes")
        return cls._assemble(names, cols, glabels, src, dst, ebytes, eslot, order)

    @classmethod
    def _assemble(cls, names, cols, glabels, src, dst, ebytes, eslot, order):
        n = len(names)
        rank = np.empty(n, np.int64)
        rank[order] = np.arange(n)
        at = order.tolist()
        names, ops, pinned = (tuple(map(seq.__getitem__, at)) for seq in (names, cols["ops"], cols["pinned"]))
        src, dst = rank[src].astype(np.int32), rank[dst].astype(np.int32)
        # Merge duplicate (src, dst, slot) edges; keep the largest byte count.
        key = np.lexsort((eslot, dst, src))
        src, dst, ebytes, eslot = src[key], dst[key], ebytes[key], eslot[key]
        if len(src):
            new = np.ones(len(src), bool)
            new[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1]) | (eslot[1:] != eslot[:-1])
            starts = np.flatnonzero(new)
            ebytes = np.maximum.reduceat(ebytes, starts)
            src, dst, eslot = src[starts], dst[starts], eslot[starts]
        succ_ptr = _ptr(src, n)
        pred_eid = np.lexsort((src, dst)).astype(np.int64)
        group, group_ptr, group_nodes = _groups(list(map(glabels.__getitem__, at)))
        return cls(
            names=names, ops=ops,
            comp_us=cols["comp_us"][order], out_bytes=cols["out_bytes"][order],
            persist_bytes=cols["persist_bytes"][order], temp_bytes=cols["temp_bytes"][order],
            kind=cols["kind"][order],
            group=group, pinned=pinned,
            edge_src=src, edge_dst=dst, edge_bytes=ebytes, edge_slot=eslot,
            succ_ptr=succ_ptr, pred_ptr=_ptr(dst[pred_eid], n),
            pred_src=src[pred_eid], pred_eid=pred_eid,
            group_ptr=group_ptr, group_nodes=group_nodes,
        )

    def to_networkx(self, device=None):
        """The graph as a networkx.DiGraph on node ids, for checks and analysis of
        small graphs (never on a hot path). Nodes carry name, op, comp_us, out_bytes,
        group and, given a placement, device; edges carry bytes (summed over the
        tensors one pair of nodes exchanges)."""
        import networkx as nx
        out = nx.DiGraph()
        for i in range(self.num_nodes):
            out.add_node(i, name=self.names[i], op=self.ops[i], comp_us=float(self.comp_us[i]),
                         out_bytes=int(self.out_bytes[i]), group=int(self.group[i]))
            if device is not None:
                out.nodes[i]["device"] = int(device[i])
        for s, d, b in zip(self.edge_src.tolist(), self.edge_dst.tolist(), self.edge_bytes.tolist()):
            if out.has_edge(s, d):
                out.edges[s, d]["bytes"] += b
            else:
                out.add_edge(s, d, bytes=b)
        return out

    # ------------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        nodes = []
        for i in range(self.num_nodes):
            nodes.append({
                "name": self.names[i], "op": self.ops[i],
                "comp_us": float(self.comp_us[i]),
                "out_bytes": int(self.out_bytes[i]),
                "persist_bytes": int(self.persist_bytes[i]),
                "temp_bytes": int(self.temp_bytes[i]),
                "kind": KIND_NAMES[self.kind[i]],
                "group": int(self.group[i]),
                "pinned": self.pinned[i] or None,
            })
        edges = [{"src": self.names[s], "dst": self.names[d], "bytes": int(b), "slot": int(k)}
                 for s, d, b, k in zip(self.edge_src.tolist(), self.edge_dst.tolist(),
                                       self.edge_bytes.tolist(), self.edge_slot.tolist())]
        return {"format": JSON_FORMAT, "version": JSON_VERSION, "nodes": nodes, "edges": edges}

    def to_json(self, path) -> None:
        """Write the versioned JSON interchange file (temp file, then rename)."""
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(self.to_dict(), f)
        os.replace(tmp, path)

    @classmethod
    def from_dict(cls, doc: dict, source: str = "cost graph") -> "CostGraph":
        check_header(doc, source)
        with naming(source):
            return cls.build(**columns_from_dict(doc))

    @classmethod
    def from_json(cls, path) -> "CostGraph":
        """The graph in a JSON file, read in batches where it can be (a million-node
        file is never held as a million dicts); else parsed whole, as from_dict reads
        it, which gives the same graph or the error message."""
        try:
            columns = columns_from_file(path)
        except NotStreamable:
            columns = None              # read whole below, after this frame's batches are freed
        if columns is None:
            return cls.from_dict(read_json(path, GraphError), source=str(path))
        with naming(str(path)):
            return cls.build(**columns)


# ---------------------------------------------------------------- helpers
def _column(values, n, dtype, what):
    if values is None:
        return np.zeros(n, dtype)
    arr = _numeric(values, what, whole=dtype != np.float64).astype(
        np.float64 if dtype != np.int8 else np.int64).reshape(-1)
    if len(arr) != n:
        raise GraphError(f"{what} has {len(arr)} entries, expected {n}")
    if not np.all(np.isfinite(arr)):
        raise GraphError(f"{what} has a non-finite value")
    if np.any(arr < 0):
        raise GraphError(f"negative {what} ({arr[arr < 0][0]:g}) at entry {int(np.flatnonzero(arr < 0)[0])}")
    limit = MAX_TIME_US if dtype == np.float64 else MAX_SIZE
    if np.any(arr > limit):
        raise GraphError(f"{what} too large ({arr[arr > limit][0]:g}) at entry "
                         f"{int(np.flatnonzero(arr > limit)[0])}; at most {limit:g}")
    return arr.astype(dtype)


def _numeric(values, what, whole) -> np.ndarray:
    """`values` as an array of numbers (whole ones where `whole`: bytes, slots, kinds);
    GraphError on strings, booleans or fractions, which numpy would convert silently."""
    if isinstance(values, (list, tuple)) and any(isinstance(x, (bool, np.bool_)) for x in values):
        raise GraphError(f"{what} must be numbers, not booleans")       # numpy would make them 0 and 1
    raw = np.asarray(values)
    if raw.dtype.kind == "O" and all(isinstance(x, (numbers.Real, decimal.Decimal)) and not isinstance(x, bool)
                                     for x in raw.reshape(-1)):
        try:                                    # integers beyond 64 bits, Decimals: numbers
            raw = raw.astype(np.float64)
        except OverflowError:
            raise GraphError(f"{what} too large (beyond a float)") from None
    if raw.size and raw.dtype.kind not in "iuf":
        raise GraphError(f"{what} must be numbers, not {raw.reshape(-1)[0]!r} ({raw.dtype})")
    if whole and raw.dtype.kind == "f":
        frac = np.flatnonzero(np.isfinite(raw.reshape(-1)) & (raw.reshape(-1) != np.floor(raw.reshape(-1))))
        if len(frac):
            raise GraphError(f"{what} must be whole numbers, not {raw.reshape(-1)[frac[0]]!r} "
                             f"at entry {int(frac[0])}")
    return raw


def _check_text(strings, what):
    """GraphError on a string no file can hold: a lone surrogate (JSON's "\\ud800")
    is valid in a Python str but not in UTF-8, so placement.csv could not be written."""
    try:
        "\n".join(strings).encode("utf-8")
    except UnicodeEncodeError:
        bad = next(x for x in strings if not _encodes(x))
        raise GraphError(f"{what} {bad!r} is not valid Unicode text (a lone surrogate)") from None


def _encodes(text) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_total_bytes(cols, edge_bytes):
    """GraphError when all the graph's bytes together pass MAX_TOTAL_BYTES: each value
    may be up to 1 EiB, but the emulator's levels and the reports' sums are int64."""
    total = sum(float(x.sum(dtype=np.float64))
                for x in (cols["out_bytes"], cols["persist_bytes"], cols["temp_bytes"], edge_bytes))
    if total > MAX_TOTAL_BYTES:
        raise GraphError(f"the graph's bytes add up to {total:.3g}, more than {MAX_TOTAL_BYTES:.3g} "
                         f"(4 EiB): sums of them would overflow")


def _node_columns(n, ops, comp_us, out_bytes, persist_bytes, kind, pinned):
    cols = {
        "ops": [""] * n if ops is None else [str(x) for x in ops],
        "pinned": [""] * n if pinned is None else [x or "" for x in pinned],
        "comp_us": _column(comp_us, n, np.float64, "compute time"),
        "out_bytes": _column(out_bytes, n, np.int64, "output bytes"),
        "persist_bytes": _column(persist_bytes, n, np.int64, "persistent bytes"),
        "kind": _column(kind, n, np.int8, "kind"),
    }
    if len(cols["ops"]) != n or len(cols["pinned"]) != n:
        raise GraphError("ops and pinned need one entry per node")
    if np.any(cols["kind"] > REFERENCE):
        raise GraphError("kind must be 0 (normal), 1 (residual) or 2 (reference)")
    return cols


def _edge_ids(names, edge_src, edge_dst):
    edge_src, edge_dst = (x if isinstance(x, np.ndarray) else list(x) for x in (edge_src, edge_dst))
    if len(edge_src) != len(edge_dst):
        raise GraphError("edge_src and edge_dst differ in length")
    n = len(names)
    named = any(len(x) and isinstance(x[0], str) for x in (edge_src, edge_dst))
    index = dict(zip(names, range(n))) if named else None
    if len(set(names) if index is None else index) < n:
        first = {}
        for i, name in enumerate(names):
            if first.setdefault(name, i) != i:
                raise GraphError(f"duplicate node name {name!r}")

    def ids(column):
        if len(column) and isinstance(column[0], str):
            try:
                return np.fromiter(map(index.__getitem__, column), np.int64, len(column))
            except KeyError as exc:
                raise GraphError(f"dangling edge: no node named {exc.args[0]!r}") from None
        arr = np.asarray(column, np.int64).reshape(-1)
        bad = (arr < 0) | (arr >= n)
        if np.any(bad):
            raise GraphError(f"dangling edge: node id {int(arr[bad][0])} not in 0..{n - 1}")
        return arr

    return ids(edge_src), ids(edge_dst)


def _topological_order(n, src, dst, names):
    """Kahn's algorithm; among ready nodes the smallest input index goes first."""
    if len(src) == 0 or np.all(src < dst):
        return np.arange(n, dtype=np.int64)
    order_e = np.argsort(src, kind="stable")
    ptr = _ptr(src[order_e], n).tolist()
    succ = dst[order_e].tolist()
    indeg = np.bincount(dst, minlength=n).tolist()
    heap = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        u = heapq.heappop(heap)
        out.append(u)
        for v in succ[ptr[u]:ptr[u + 1]]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, v)
    if len(out) < n:
        stuck = next(i for i in range(n) if indeg[i] > 0)
        raise GraphError(f"graph has a cycle through node {names[stuck]!r}")
    return np.asarray(out, np.int64)


def _ptr(sorted_keys, n):
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(sorted_keys, minlength=n), out=ptr[1:])
    return ptr


def _groups(labels):
    """Relabel groups 0..G-1 in order of first member; CSR of members."""
    numbers = np.array(labels) if set(map(type, labels)) == {int} else None
    if numbers is not None and numbers.dtype == np.int64:
        # the same numbering by sorting: each label's rank among the first members
        unique, first, inverse = np.unique(numbers, return_index=True, return_inverse=True)
        rank = np.empty(len(unique), np.int64)
        rank[np.argsort(first)] = np.arange(len(unique))
        group, count = rank[inverse].astype(np.int32), len(unique)
    else:
        ids = {}
        group = np.fromiter((ids.setdefault(x, len(ids)) for x in labels), np.int32, len(labels))
        count = len(ids)
    order = np.argsort(group, kind="stable")
    return group, _ptr(group[order], count), order.astype(np.int32)
