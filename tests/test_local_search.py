"""The repair's local search (pardnn.repair.local_search) on three hand-made groups
whose answer is known: each a producer of 50, 30 or 20 bytes and its consumer, so a
device's peak is the bytes of the groups on it (all produced before any is freed).
The search moves, at the device most over its capacity, the group holding the most
there to the device of the lowest peak (the lower index on a tie), and keeps a move
that lowers the total overflow."""

from types import SimpleNamespace

import numpy as np

from pardnn.graph import CostGraph
from pardnn.hardware import parse_devices
from pardnn.pipeline.judge import _emulate
from pardnn.repair import local_search


def groups():
    return CostGraph.build(names=["a", "b", "c", "x", "y", "z"], comp_us=[1] * 6, out_bytes=[50, 30, 20, 0, 0, 0],
                           edge_src=["a", "b", "c"], edge_dst=["x", "y", "z"], edge_bytes=[50, 30, 20],
                           group=[0, 1, 2, 0, 1, 2])


def search(start, memory=60, k=4, allowed=None, limit=None):
    """(descend's answer, the group placements it emulated)."""
    g, c = groups(), parse_devices(f"cpu:{k}").with_options(memory=memory, reserve=0)
    tried = []

    def emulate(device):
        tried.append(device[:3].tolist())                   # nodes 0, 1, 2 are groups 0, 1, 2
        return _emulate(g, c, device)
    allowed = np.ones((g.num_groups, k), bool) if allowed is None else allowed
    found = local_search.descend(g, c, np.array(start), allowed, emulate, limit)
    return (None if found is None else found.tolist()), tried


def test_the_group_holding_most_moves_to_the_device_of_the_lowest_peak():
    # peaks 80, 0, 0, 20 at 60 B: group 0 (50 B) to device 1 (0 B, before device 2)
    assert search([0, 0, 3]) == ([1, 0, 3], [[0, 0, 3], [1, 0, 3]])
    assert search([0, 0, 1]) == ([2, 0, 1], [[0, 0, 1], [2, 0, 1]])        # device 1 holds 20 B: 2 first


def test_a_placement_that_fits_is_returned_as_it_is():
    start = np.array([0, 1, 2])
    assert search(start) == ([0, 1, 2], [[0, 1, 2]]) and start.tolist() == [0, 1, 2]


def test_pinned_groups_stay():
    allowed = np.ones((3, 4), bool)
    allowed[0, 1] = False                                   # group 0 may not go to device 1
    assert search([0, 0, 3], allowed=allowed)[0] == [2, 0, 3]
    allowed[0] = [True, False, False, False]                # group 0 stays: group 1 moves
    assert search([0, 0, 3], allowed=allowed) == ([0, 1, 3], [[0, 0, 3], [0, 1, 3]])


def test_moves_that_lower_the_overflow_are_kept_until_it_fits():
    # at 45 B group 0 fits nowhere: 0 -> 1 (over 5 + 5), then at device 0 1 -> 2 (device
    # 0 fits, device 1 still over by 5), then group 0 to 0 or 2 makes it worse: None
    found, tried = search([0, 0, 0], memory=45, k=3)
    assert found is None and tried == [[0, 0, 0], [1, 0, 0], [1, 2, 0], [0, 2, 0], [2, 2, 0]]
    assert search([0, 0, 0], memory=50, k=3)[0] == [1, 0, 0]


def test_the_work_limit_counts_nodes_and_edges_emulated():
    # each emulation costs nodes + edges + 1 = 10: the first, then one trial, is 20
    assert search([0, 0, 3], limit=20)[0] == [1, 0, 3]
    assert search([0, 0, 3], limit=19) == (None, [[0, 0, 3]])
    assert local_search.WORK_LIMIT == 3_000_000


def test_the_holders_at_a_devices_peak_most_first():
    g, c = groups(), parse_devices("cpu:2")
    device = np.array([0, 0, 1, 0, 0, 1])
    schedule, profile = _emulate(g, c, device)
    assert profile.peak_bytes.tolist() == [80, 20]
    assert local_search._holders(g, np.array([0, 0, 1]), schedule, profile, 0) == [0, 1]
    assert local_search._holders(g, np.array([0, 0, 1]), schedule, profile, 1) == [2]
    assert local_search._overflow(np.array([80, 20, 5]), np.array([60, 30, 5])) == 20


def test_one_byte_over_is_over():
    # peaks 80, 0, 0, 20 at 79 B
    assert search([0, 0, 3], memory=79)[0] == [1, 0, 3]


def test_the_search_starts_at_the_device_most_over_its_capacity_not_the_fullest():
    g, c = groups(), parse_devices("cpu:4")
    capacities = SimpleNamespace(capacity=np.array([100, 10, 100, 100]))     # emulated on 4 alike devices
    found = local_search.descend(g, capacities, np.array([0, 0, 1]), np.ones((3, 4), bool),
                                 lambda device: _emulate(g, c, device))
    assert found.tolist() == [0, 0, 2]        # device 1 (20 B of 10) is over, device 0 (80 B of 100) is not


def test_the_holders_are_the_buffers_alive_and_the_ops_running_at_the_peak():
    # eight nodes, each its own group, node 2 on device 1, the rest on device 0; device 0's peak at 5 us
    graph = SimpleNamespace(group=np.arange(8), num_groups=8, out_bytes=np.array([0, 0, 0, 7, 50, 0, 0, 0]),
                            temp_bytes=np.array([0, 0, 0, 2, 0, 0, 0, 0]))
    group_dev = np.array([0, 0, 1, 0, 0, 0, 0, 0])
    buffers = np.array([    # device, alloc, free, node, owner (-1: none), bytes
        [0, 5, 9, 0, -1, 10],       # allocated at the peak: alive, group 0
        [0, 1, 5, 1, -1, 100],      # freed at the peak: not alive
        [1, 0, 9, 2, 7, 1000],      # on device 1
        [0, 7, 9, 1, -1, 500],      # allocated later
        [0, 0, 9, 6, -1, 8],        # group 6
        [0, 0, 9, 5, -1, 1],        # group 5, one byte
        [0, 0, 9, 2, 4, 3],         # made by a group on device 1, freed by group 4 here: group 4's
    ])
    profile = SimpleNamespace(peak_time_us=np.array([5.0, 0.0]), buf_device=buffers[:, 0],
                              buf_alloc=buffers[:, 1].astype(float), buf_free=buffers[:, 2].astype(float),
                              buf_node=buffers[:, 3], buf_owner=buffers[:, 4], buf_bytes=buffers[:, 5])
    schedule = SimpleNamespace(start=np.array([0, 0, 0, 5, 2, 0, 0, 0], float),     # node 3 starts at the peak,
                               finish=np.array([1, 1, 1, 6, 5, 1, 1, 1], float))    # node 4 ends at it
    # held: group 0 10, group 3 7 + 2 (running), group 6 8, group 4 3, group 5 1
    assert local_search._holders(graph, group_dev, schedule, profile, 0) == [0, 3, 6, 4, 5]


def test_a_move_that_only_shifts_the_overflow_is_not_kept():
    # 40 and 70 B: group 0 to device 1 (over 10 + 0); then group 1 there would leave
    # device 1 over by as much as device 0 was (10): not kept; group 2 there fits
    g, c = groups(), parse_devices("cpu:2")
    tried = []

    def emulate(device):
        tried.append(device[:3].tolist())
        return _emulate(g, c, device)
    found = local_search.descend(g, SimpleNamespace(capacity=np.array([40, 70])), np.array([0, 0, 0]),
                                 np.ones((3, 2), bool), emulate, limit=1000)
    assert found.tolist() == [1, 0, 1] and tried == [[0, 0, 0], [1, 0, 0], [1, 1, 0], [1, 0, 1]]
