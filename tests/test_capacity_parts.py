"""pardnn.pipeline.capacity's small parts on hand-made numbers, fast enough to run
against each of its mutants (tools/mutation.py): the memory whose usable part holds a
capacity, the bisection's bracket, a cluster's first devices, and the refusal of one
device."""

import math

import pytest

from pardnn.base.errors import UserError
from pardnn.hardware import parse_devices
from pardnn.pipeline import capacity as cap


@pytest.mark.parametrize("reserve", [0.0, 0.1, 0.25, 0.3, 1 / 3, 0.5])
def test_the_memory_is_the_least_whose_usable_part_holds_the_capacity(reserve):
    for capacity in [0, 1, 7, 9, 21, 100, 12_345, 10**9, 10**9 + 7]:
        m = cap._memory(capacity, reserve)
        assert math.floor(m * (1.0 - reserve)) >= capacity, (capacity, reserve, m)
        assert m == 0 or math.floor((m - 1) * (1.0 - reserve)) < capacity, (capacity, reserve, m)
    assert cap._memory(21, 0.3) == 30         # 21 / 0.7 is 30.000000000000004: rounded up to 31, then back


def test_the_bisection_of_small_memories_ends_at_the_least_that_fits():
    tried = []

    def fits(m):
        tried.append(m)
        return m >= 37
    assert cap._near(10) == 10 and cap._bisect(10, 90, fits) == 37     # a bracket of 1 byte below 100
    assert all(10 <= m < 90 for m in tried) and len(tried) == len(set(tried))
    tried.clear()       # near the top, within ENDGAME tolerances: the top less one byte (80), not the midpoint
    assert cap._bisect(10, 90, lambda m: tried.append(m) or m >= 80) == 80
    assert tried == [49, 69, 79, 84, 81, 80]


def test_the_first_devices_keep_their_hosts():
    two = parse_devices("2xcpu:2")
    assert len(cap.first_devices(two, 3).hosts) == 2 and cap.first_devices(two, 3).num_devices == 3
    assert len(cap.first_devices(two, 2).hosts) == 1
    assert cap.first_devices(two, 3).latency_us.shape == (3, 3)


def test_capacity_needs_two_devices_or_more():
    cap.check_devices(parse_devices("cpu:2"))
    with pytest.raises(UserError, match=r"^--devices: capacity compares device counts"):
        cap.check_devices(parse_devices("cpu:1"))
