"""A placement.csv's devices, as devices of this process."""

from __future__ import annotations

import csv

import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
import tensorflow as tf

from pardnn.base.errors import UserError


def read_devices(path) -> dict:
    """Node name -> device of a placement.csv, every device one this process has."""
    known = known_devices()
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:      # (an editor's BOM is no header)
            rows = list(csv.reader(f))
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text CSV file") from None
    except csv.Error as exc:         # a stray quote runs a field to the end of the file
        raise UserError(f"{path}: not a CSV file ({exc})") from None
    if not rows or [h.strip() for h in rows[0][:2]] != ["node", "device"]:
        raise UserError(f"{path}:1: expected the header 'node,device'")
    devices = {}
    for lineno, row in enumerate(rows[1:], start=2):
        if len(row) < 2:
            raise UserError(f"{path}:{lineno}: expected 'node,device'")
        device = local_device(row[1].strip())
        if device not in known:
            raise UserError(f"{path}:{lineno}: device {row[1].strip()!r} is not one of this process's "
                            f"devices ({', '.join(sorted(known))})")
        devices[row[0]] = device
    return devices


def known_devices() -> set:
    """This process's logical devices, as local_device names."""
    return {local_device(d.name) for d in tf.config.list_logical_devices()}


def local_device(name) -> str:
    """A device name of this process without its job/replica/task: /device:CPU:1."""
    spec = tf.DeviceSpec.from_string(name)
    if spec.job not in (None, "localhost") or spec.task not in (None, 0):
        return name
    return tf.DeviceSpec(device_type=spec.device_type, device_index=spec.device_index).to_string()


def gpu_memory() -> list:
    """Bytes TensorFlow may allocate on each of this process's GPUs, in order: a
    physical GPU's memory less what the driver keeps, a logical GPU's memory_limit."""
    from tensorflow.python.client import device_lib
    return [int(d.memory_limit) for d in device_lib.list_local_devices() if d.device_type == "GPU"]
