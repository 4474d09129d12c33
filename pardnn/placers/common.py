"""Pieces shared by the baseline placers.

The baselines decide per colocation group: a group's device is fixed by the first
of its members that a placer handles, and every later member follows it. Groups
cannot simply be contracted into single nodes for the list schedulers, because a
group such as {variable, its read, its optimizer apply} would then form a cycle
with the ops between its members.
"""

from typing import NamedTuple

import numpy as np


def link_tables(cluster) -> tuple:
    """(latency, 1/bandwidth) as K x K nested lists with zeros on the diagonal,
    so `finish + lat[a][b] + bytes * inv_bw[a][b]` is the arrival time on b of a
    tensor produced on a (and just `finish` when a == b)."""
    inv = 1.0 / np.asarray(cluster.bandwidth, float)
    np.fill_diagonal(inv, 0.0)
    lat = np.array(cluster.latency_us, float)
    np.fill_diagonal(lat, 0.0)
    return lat.tolist(), inv.tolist()


class Graph(NamedTuple):
    """The edges both ways and the colocation groups, int64 (bool for data_edge): what
    the compiled list schedulers (m-ETF, HEFT) read of a CostGraph."""

    pred_ptr: np.ndarray
    pred_src: np.ndarray
    pred_eid: np.ndarray
    succ_ptr: np.ndarray
    edge_dst: np.ndarray
    edge_bytes: np.ndarray
    data_edge: np.ndarray       # per edge: carries a tensor (not a control edge)
    group: np.ndarray           # per node
    group_ptr: np.ndarray
    group_nodes: np.ndarray


def graph_arrays(graph) -> Graph:
    i64 = np.int64
    return Graph(*(np.asarray(a, i64) for a in (graph.pred_ptr, graph.pred_src, graph.pred_eid, graph.succ_ptr,
                                                graph.edge_dst, graph.edge_bytes)), graph.edge_slot >= 0,
                 *(np.asarray(a, i64) for a in (graph.group, graph.group_ptr, graph.group_nodes)))
