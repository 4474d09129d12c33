"""Everything on one device: what TensorFlow does when nobody places the graph.

Every node goes to device 0, except colocation groups pinned to a device kind that
device 0 is not (e.g. CPU-only ops in a mixed cluster), which go to the first
device of the right kind.
"""

import numpy as np

from pardnn.graph.constraints import allowed_devices


def place(graph, cluster, timings=None) -> np.ndarray:
    allowed = allowed_devices(graph, cluster)
    first = np.argmax(allowed, axis=1).astype(np.int32)    # first True in each row
    return first[graph.group]
