"""Placement: a device index per node, the cluster it refers to, and provenance.

`placement.csv` has the header `node,device` and one row per node with the full
TensorFlow device name. When reading, the device column may also be a device index
or a short name (`GPU:1`). Every error names the file and the first offending line.
Beside it, order.csv holds the control edges of a placement's order, and
recompute.csv the edges into and out of the recomputed ops' copies
(pardnn.graph.recompute.recompute_rows), which a placed tf.function rebuilds (docs/tf2.md).
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass, field

import numpy as np

from pardnn.base.errors import UserError

RECOMPUTE_HEADER = ["producer", "slot", "consumer"]


@dataclass
class Placement:
    device: np.ndarray                      # int32, one entry per node
    cluster: object                         # pardnn.hardware.cluster.Cluster
    algorithm: str = ""
    options: dict = field(default_factory=dict)
    stage_seconds: dict = field(default_factory=dict)
    schedule: object = None                 # the judged emulation (pardnn.emulator), if any
    profile: object = None                  # its memory over the step
    order: object = None                    # control edges it carries (pardnn.graph.order.Order), if any
    schedule_name: str = "fifo"             # the order's schedule (pardnn.pipeline.schedule)

    def counts(self) -> np.ndarray:
        """Number of nodes on each device."""
        return np.bincount(self.device, minlength=self.cluster.num_devices)

    def write_csv(self, graph, path) -> None:
        """Write placement.csv (temp file, then rename)."""
        tmp = f"{path}.tmp{os.getpid()}"
        names = self.cluster.names
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(["node", "device"])
            out.writerows(zip(graph.names, (names[d] for d in self.device.tolist())))
        os.replace(tmp, path)


    def write_order_csv(self, graph, path) -> None:
        """Write order.csv: one control edge a line, `before,after` by node name."""
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(["before", "after"])
            out.writerows((graph.names[b], graph.names[a])
                          for b, a in zip(self.order.before.tolist(), self.order.after.tolist()))
        os.replace(tmp, path)


def read_order_csv(path) -> list:
    """The (before, after) name rows of an order.csv; [] when there is none. UserError
    naming the file and line of a row that is not two names."""
    if not os.path.exists(path):
        return []
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for lineno, row in enumerate(csv.reader(f), 1):
            if lineno == 1 and row == ["before", "after"]:
                continue
            if len(row) != 2 or not all(row):
                raise UserError(f"{path}:{lineno}: expected `before,after` (two node names), got {row!r}")
            rows.append((row[0], row[1]))
    return rows


def write_recompute_csv(rows, path) -> None:
    """Write recompute.csv: `producer,slot,consumer`, one row per edge into or out of a
    copy (pardnn.graph.recompute.recompute_rows)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(RECOMPUTE_HEADER)
        out.writerows(rows)
    os.replace(tmp, path)


def read_recompute_csv(path) -> list:
    """The (producer, slot, consumer) rows of a recompute.csv; [] when there is none.
    UserError naming the file and line of a row that is not two names around a slot
    (an output index, or -1 for a control edge)."""
    if not os.path.exists(path):
        return []
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for lineno, row in enumerate(csv.reader(f), 1):
            if lineno == 1 and row == RECOMPUTE_HEADER:
                continue
            slot = row[1].strip() if len(row) == 3 else ""
            if len(row) != 3 or not row[0] or not row[2] or not re.fullmatch(r"-1|[0-9]+", slot):
                raise UserError(f"{path}:{lineno}: expected `producer,slot,consumer` (a node name, an "
                                f"output index or -1, a node name), got {row!r}")
            rows.append((row[0], int(slot), row[2]))
    return rows


def read_csv(path, graph, cluster) -> np.ndarray:
    """Device index per node from a placement.csv; UserError on any bad line."""
    index = graph.index()
    device = np.full(graph.num_nodes, -1, np.int32)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:      # (an editor's BOM is no header)
            rows = csv.reader(f)
            lineno = 1
            header = next(rows, None)
            if header is None or [h.strip() for h in header[:2]] != ["node", "device"]:
                raise UserError(f"{path}:1: expected the header 'node,device'")
            devices = {}                # each distinct device text looked up once
            for lineno, row in enumerate(rows, start=2):
                _read_row(path, lineno, row, index, cluster, device, devices)
    except OSError as exc:
        raise UserError(f"--placement: cannot read {path} ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise UserError(f"--placement: {path} is not a text CSV file") from None
    except csv.Error as exc:         # a stray quote runs a field to the end of the file
        raise UserError(f"{path}:{lineno + 1}: not a CSV row ({exc})") from None
    missing = np.flatnonzero(device < 0)
    if len(missing):
        raise UserError(f"{path}: {len(missing)} nodes of the profile have no device, "
                        f"e.g. {graph.names[missing[0]]!r}")
    return device


def _read_row(path, lineno, row, index, cluster, device, devices):
    if not row:
        return
    if len(row) != 2:
        raise UserError(f"{path}:{lineno}: expected 'node,device', got {','.join(row)!r}")
    node, dev = row[0], row[1].strip()
    if node not in index:               # names are exact; a hand-written "a, 0" has spaces to drop
        node = node.strip()
    if node not in index:
        raise UserError(f"{path}:{lineno}: node {node!r} is not in the profile")
    k = cluster.num_devices
    if dev not in devices:
        try:
            number = dev.lstrip("-")
            devices[dev] = int(dev) if number.isascii() and number.isdigit() else cluster.device_index(dev)
        except KeyError:
            raise UserError(f"{path}:{lineno}: device {dev!r} is not in the cluster "
                            f"({', '.join(cluster.names)})") from None
    d = devices[dev]
    if not 0 <= d < k:
        raise UserError(f"{path}:{lineno}: device index {d} is outside the cluster (0..{k - 1})")
    if device[index[node]] >= 0:
        raise UserError(f"{path}:{lineno}: node {node!r} is listed twice")
    device[index[node]] = d
