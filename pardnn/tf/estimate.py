"""Analytical op costs for a device you don't have: an estimated profile dir.

`pardnn profile MODEL --estimate PRESET` builds the model's training graph and,
instead of running it, asks TensorFlow's Grappler virtual cluster what each op of
one training step would cost on one GPU of the preset (pardnn.hardware.gpu_specs):

1. The model's GraphDef goes into a MetaGraphDef whose `train_op` collection holds
   the ops a profiled step fetches (train op and loss), every node placed on the
   target device (Grappler costs only nodes that carry a device), placeholders
   given the shapes the model's feed function produces (else unknown batch
   dimensions would be costed as 1).
2. `Cluster(devices=[NamedDevice(...)]).MeasureCosts(item)` runs Grappler's
   VirtualScheduler with its OpLevelCostEstimator (compute time + memory time per
   op, pardnn.hardware.gpu_specs) and returns StepStats with per-node times in ns and
   output sizes; `DeterminePeakMemoryUsage` estimates the step's peak memory.
3. Ops of the step that Grappler did not schedule ("dropped") or has no cost model
   for ("unmodelled", pardnn.tf.grappler_ops) are costed by the documented
   fallback, bytes touched / memory bandwidth, and counted.
4. What Grappler leaves out is added (pardnn.hardware.gpu_specs): MatMul and
   convolution compute at the tensor-core rate of the chosen precision (the FP32
   compute term Grappler charged is replaced), then the fixed per-op overhead,
   once per op.
5. The StepStats go into a RunMetadata and the profile dir is written in the
   format of a measured one (graph.pb, run_metadata_0.pb, profile.json), so the
   same loader (pardnn.tf.profile_loader) reads it and place/emulate/compare work unchanged.
   profile.json says the costs are estimated, for which device, with which figures,
   and how many nodes took the fallback.

Limits, by Grappler's design: one device (no ops pinned to the host CPU), a
while-loop body costed once.

Inside Grappler the device is named `GRAPPLER_DEVICE`, of no kind TensorFlow knows:
MeasureCosts also describes each costed node's device for its per-op report (which
pardnn does not read), and for a device named GPU it asks CUDA for this machine's GPU,
which on a machine without one logs `Failed to get device properties` once per node.
The costs come from the properties handed to the virtual cluster, not from the name;
the StepStats are renamed to the target device afterwards.
"""

from __future__ import annotations

import datetime
import math
import time
from dataclasses import dataclass

import numpy as np
import pardnn.tf.quiet_import  # noqa: F401  (first: hides TensorFlow's start-up lines)
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2, device_properties_pb2, meta_graph_pb2
from tensorflow.python.grappler import cluster as gcluster
from tensorflow.python.grappler import item as gitem

from pardnn.hardware import gpu_specs
from pardnn.hardware.presets import estimate_gpu
from pardnn.hardware.cluster import LOCAL_PREFIX
import pardnn.tf.grappler_ops as grappler_ops
from pardnn.tf.profiling import write_profile_dir


UNBOUNDED_MEMORY = 1 << 50     # bytes: the virtual device's memory when costing ops
# the virtual device's name: a kind of device neither CPU nor GPU, so that Grappler
# asks this machine for no device's properties (module docstring)
GRAPPLER_DEVICE = f"{LOCAL_PREFIX}ESTIMATED:0"


@dataclass(frozen=True)
class Target:
    """The one device ops are costed for."""

    label: str               # preset name, or "host-cpu"
    kind: str                # "GPU" or "CPU"
    properties: dict         # DeviceProperties fields (pardnn.hardware.gpu_specs units)
    bandwidth_gbs: float     # memory bandwidth used by the fallback
    peak_gflops: float       # FP32 rate: Grappler's compute term
    description: dict        # what profile.json records about the device
    precision: str = "fp32"  # MatMul/convolution precision
    matmul_gflops: float = 0.0   # MatMul/convolution rate at that precision (0: the FP32 peak)
    op_overhead_us: float = 0.0  # fixed cost added once to every op
    conv_efficiency: float = 1.0  # convolutions run at this share of that rate

    @property
    def tensor_gflops(self) -> float:
        return self.matmul_gflops or self.peak_gflops

    @property
    def conv_gflops(self) -> float:
        return self.tensor_gflops * self.conv_efficiency

    @property
    def device(self) -> str:
        return f"{LOCAL_PREFIX}{self.kind}:0"


def gpu_target(spec: str, flag: str = "--estimate", op_overhead_us: float | None = None,
               precision: str | None = None, conv_efficiency: float | None = None) -> Target:
    """The Target for a GPU preset name (UserError listing the presets otherwise).

    `op_overhead_us` and `precision` default to the preset's overhead and to the
    precision TensorFlow uses unasked on that GPU (pardnn.hardware.gpu_specs);
    `conv_efficiency` to 1, the peak rate Grappler assumes (docs/estimates.md,
    "Accuracy against a GPU", measured less); a bad share is a UserError naming the flag
    (`--conv-efficiency` with `flag` "--estimate", else `conv_efficiency`)."""
    conv_efficiency = gpu_specs.check_conv_efficiency(
        conv_efficiency, "--conv-efficiency" if flag.startswith("--") else "conv_efficiency")
    label, gpu = estimate_gpu(spec, flag)
    precision = gpu_specs.check_precision(gpu, label, precision)
    overhead = gpu.op_overhead_us if op_overhead_us is None else float(op_overhead_us)
    return Target(label, "GPU", gpu.device_properties(), gpu.bandwidth_gbs, gpu.peak_fp32_gflops,
                  gpu.to_dict(), precision, gpu.matmul_peak_gflops(precision), overhead, conv_efficiency)


def host_cpu_target(bandwidth_gbs: float, peak_gflops: float | None = None) -> Target:
    """This machine's CPU as TensorFlow describes it (clock, cores, caches), with a
    memory bandwidth the caller measured (TF leaves it unset).

    Grappler rates a CPU at one FLOP per cycle per core, ignoring SIMD units; given
    a measured `peak_gflops`, the core count handed to Grappler is scaled so that its
    rate equals it (the same correction pardnn.hardware.gpu_specs makes for Hopper GPUs)."""
    local = gcluster.Cluster()
    try:
        props = next(d for d in local.ListDevices() if d.properties.type == "CPU").properties
    finally:
        local.Shutdown()
    cores = props.num_cores
    if peak_gflops is not None:
        cores = max(1, int(round(peak_gflops / (props.frequency * 1e-3))))
    fields = {"type": "CPU", "vendor": props.vendor, "model": props.model,
              "frequency": props.frequency, "num_cores": cores,
              "bandwidth": int(bandwidth_gbs * 1e6), "l1_cache_size": props.l1_cache_size,
              "l2_cache_size": props.l2_cache_size, "l3_cache_size": props.l3_cache_size,
              "environment": dict(props.environment)}
    description = {"name": f"host CPU ({props.vendor} model {props.model})",
                   "clock_mhz": props.frequency, "cores": props.num_cores, "grappler_cores": cores,
                   "peak_gflops": props.frequency * 1e-3 * cores, "bandwidth_gbs": bandwidth_gbs,
                   "source": "TensorFlow's description of the local CPU; bandwidth"
                             + (" and peak rate" if peak_gflops is not None else "") + " measured"}
    return Target("host-cpu", "CPU", fields, bandwidth_gbs, description["peak_gflops"], description)


def estimate_model(model, target: Target, out_dir: str, meta=None) -> dict:
    """Write an estimated profile dir for `model` on `target`; returns profile.json.

    profile.json carries the keys of a measured profile (pardnn.tf.profiling) and
    `costs`: source "estimated", the target device and its figures, Grappler's step
    time and peak memory, the fallback counts and names, and the seconds taken."""
    run_metadata, info = estimate_step(model, target)
    doc = {
        "tf_version": tf.__version__,
        "devices": [target.device],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "steps": 1, "warmup_steps": 0,
        "fetches": [model.train_op, model.loss],
        "feeds": sorted(model.feed(0)) if model.feed is not None else [],
        "train_op": model.train_op, "loss": model.loss, "init": model.init, "seed": model.seed,
        "trainable_parameters": _trainable_parameters(model.graph),
        **(meta or {}),
        "costs": costs_doc(target, info),
    }
    write_profile_dir(out_dir, model.graph, [run_metadata], doc)
    return doc


def costs_doc(target: Target, info: dict) -> dict:
    """profile.json `costs` of an estimated profile: source, target and its figures, info."""
    return {"source": "estimated", "estimator": "grappler-virtual-cluster",
            "target": target.label, "device": target.description,
            "fallback_rule": "bytes touched / memory bandwidth (pardnn.tf.grappler_ops)", **info}


def _trainable_parameters(graph) -> int:
    """Elements of the graph's trainable variables (optimizer slots not counted)."""
    with graph.as_default():
        return int(sum(v.shape.num_elements() or 0 for v in tf.compat.v1.trainable_variables()))


def summary_line(model_name: str, doc: dict, out_dir: str) -> str:
    """What `pardnn profile --estimate` prints."""
    costs = doc["costs"]
    return (f"estimated {model_name} ({doc['trainable_parameters'] / 1e9:.3g}e9 parameters) for one "
            f"{costs['device']['name']} ({costs['target']}, "
            f"{costs['precision']} MatMul/convolution{_conv_share(costs)}, {costs['op_overhead_us']:g} us per op): "
            f"Grappler scheduled {costs['scheduled']} ops; the bytes/bandwidth fallback costed "
            f"{len(costs['fallback_nodes'])} ({costs['unmodelled']} without a Grappler model, "
            f"{costs['dropped']} dropped by it); ops sum to {costs['op_time_us'] / 1e3:.1f} ms; peak memory "
            f"{costs['peak_memory_bytes'] / 2**20:.2f} MiB; took "
            f"{costs['grappler_seconds'] + costs['fallback_seconds']:.1f} s; wrote {out_dir}")


def _conv_share(costs) -> str:
    """", convolutions at 34%" when they run below the full rate; else nothing."""
    share = costs.get("conv_efficiency", 1.0)
    return "" if share == 1.0 else f", convolutions at {share * 100:.3g}%"


def fetch_names(model) -> list:
    """Node names a profiled training step fetches: the train op and the loss."""
    return [name.split(":")[0] for name in (model.train_op, model.loss)]


def estimate_step(model, target: Target):
    """(RunMetadata, info) for one training step of `model` costed on `target`
    (estimate_graph of its graph, fetches and feed shapes)."""
    shapes = {}
    if model.feed is not None:
        shapes = {name.split(":")[0]: np.shape(value) for name, value in model.feed(0).items()}
    return estimate_graph(model.graph, fetch_names(model), shapes, target)


def estimate_graph(graph, fetches, shapes, target: Target):
    """(RunMetadata, info) for one run of the nodes `fetches` of `graph` costed on
    `target`; `shapes` gives placeholders (by node name) their fed shapes.

    info: grappler_seconds, fallback_seconds, run_time_us (Grappler's makespan,
    without tensor cores or overhead), peak_memory_bytes, scheduled, dropped,
    unmodelled (node counts), dropped_ops and unmodelled_ops {op type: count},
    fallback_nodes [names], precision, matmul_peak_gflops, conv_efficiency, tensor_core_ops (count),
    op_overhead_us, op_time_us (sum of the final op times)."""
    t0 = time.perf_counter()
    meta = _metagraph(graph, fetches, shapes, GRAPPLER_DEVICE)
    step_stats, run_time_s, peak = _grappler_costs(meta, target)
    _fill_micros(step_stats)
    t1 = time.perf_counter()
    info = _apply_fallbacks(graph, step_stats, _step_nodes(meta.graph_def, fetches),
                            target.bandwidth_gbs, target.conv_gflops)
    info.update(_apply_compute_rates(graph, step_stats, target, set(info["fallback_nodes"])))
    info.update(_apply_overhead(step_stats, target.op_overhead_us))
    info.update(_apply_workspaces(graph, step_stats))
    info.update(grappler_seconds=t1 - t0, fallback_seconds=time.perf_counter() - t1,
                run_time_us=run_time_s * 1e6, peak_memory_bytes=peak)
    return config_pb2.RunMetadata(step_stats=step_stats), info


def _metagraph(graph, fetches, shapes, device: str):
    meta = meta_graph_pb2.MetaGraphDef(graph_def=graph.as_graph_def())
    meta.collection_def["train_op"].node_list.value.extend(fetches)
    for node in meta.graph_def.node:
        node.device = device
        if node.op == "Placeholder" and node.name in shapes:
            shape = node.attr["shape"].shape
            shape.Clear()
            for size in shapes[node.name]:
                shape.dim.add(size=int(size))
    return meta


def _grappler_costs(meta, target: Target):
    """(StepStats, Grappler's step time in s, peak memory bytes) from the virtual cluster.

    The virtual device gets unbounded memory: Grappler refuses to cost a graph that
    needs more than the device holds, yet op times do not depend on the memory size,
    and graphs too big for one GPU are what placement is for. The device is
    GRAPPLER_DEVICE there (module docstring) and `target.device` in the StepStats."""
    props = dict(target.properties, memory_size=UNBOUNDED_MEMORY)
    environment = props.pop("environment", {})
    device = device_properties_pb2.NamedDevice(
        name=GRAPPLER_DEVICE, properties=device_properties_pb2.DeviceProperties(**props))
    device.properties.environment.update(environment)
    item = gitem.Item(meta)
    cluster = gcluster.Cluster(disable_detailed_stats=False, disable_timeline=False, devices=[device])
    try:
        _, run_time, step_stats = cluster.MeasureCosts(item)
        peak = cluster.DeterminePeakMemoryUsage(item)
    finally:
        cluster.Shutdown()
    for dev in step_stats.dev_stats:
        dev.device = target.device
    return step_stats, float(run_time), int(sum(v[0] for v in peak.values()))


def _step_nodes(graph_def, fetches) -> set:
    """Names of the nodes a session runs to fetch `fetches`: their transitive inputs
    (data and control, loop back edges included)."""
    inputs = {node.name: node.input for node in graph_def.node}
    seen, stack = set(), list(fetches)
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack.extend(text.lstrip("^").split(":")[0] for text in inputs[name])
    return seen


def _apply_fallbacks(graph, step_stats, step_nodes: set, bandwidth_gbs: float, conv_gflops: float) -> dict:
    """Re-cost unmodelled ops and add dropped ones, in place; counts for profile.json."""
    stats = {ns.node_name: ns for dev in step_stats.dev_stats for ns in dev.node_stats}
    ops = {op.name: op for op in graph.get_operations() if op.name in stats or op.name in step_nodes}
    dropped = sorted(step_nodes - stats.keys())
    unmodelled = sorted(name for name in stats
                        if name in ops and not grappler_ops.is_modelled(ops[name].type))
    device_stats = step_stats.dev_stats[0]
    for name in dropped:
        stats[name] = device_stats.node_stats.add(node_name=name, timeline_label=ops[name].type)
    for name in dropped + unmodelled:
        _set_time(stats[name], _fallback_ns(ops[name], stats, bandwidth_gbs, conv_gflops))
    return {"scheduled": len(stats) - len(dropped), "dropped": len(dropped),
            "unmodelled": len(unmodelled),
            "dropped_ops": _count_types(ops, dropped), "unmodelled_ops": _count_types(ops, unmodelled),
            "fallback_nodes": dropped + unmodelled}


def _apply_compute_rates(graph, step_stats, target: Target, fallback: set) -> dict:
    """Re-cost the compute of Grappler-costed MatMul and 2-D convolution ops: Grappler's
    FP32 term (ceil(FLOPs / FP32 peak) ns) is replaced by FLOPs / the precision's rate,
    or for convolutions by FLOPs / `conv_efficiency` of that rate; the memory term
    stays. At FP32 only convolutions change, and only below the full rate. Fallback-
    costed ops have no such term (3-D convolutions got the convolution rate there)."""
    info = {"precision": target.precision, "matmul_peak_gflops": target.tensor_gflops,
            "conv_efficiency": target.conv_efficiency, "tensor_core_ops": 0}
    tensor_cores = target.tensor_gflops != target.peak_gflops
    if not tensor_cores and target.conv_efficiency == 1.0:
        return info
    ops = {op.name: op for op in graph.get_operations()}
    stats = {ns.node_name: ns for dev in step_stats.dev_stats for ns in dev.node_stats}
    for name, ns in stats.items():
        op = None if name in fallback else ops.get(name)
        if op is None or op.type not in grappler_ops.TENSOR_CORE_OPS:
            continue
        conv = op.type.startswith("Conv")
        flops = _tensor_flops(op, stats) if tensor_cores or conv else 0
        if flops:
            memory_ns = max(0, ns.all_end_rel_nanos - math.ceil(flops / target.peak_gflops))
            _set_time(ns, memory_ns + flops / (target.conv_gflops if conv else target.tensor_gflops))
            info["tensor_core_ops"] += int(tensor_cores)
    return info


def _apply_overhead(step_stats, overhead_us: float) -> dict:
    """Add the fixed per-op cost once to every op's time; the sum of the final times."""
    total_ns = 0
    for dev in step_stats.dev_stats:
        for ns in dev.node_stats:
            if overhead_us:
                _set_time(ns, ns.all_end_rel_nanos + overhead_us * 1e3)
            total_ns += ns.all_end_rel_nanos
    return {"op_overhead_us": overhead_us, "op_time_us": total_ns / 1e3}


def _apply_workspaces(graph, step_stats) -> dict:
    """Scratch memory of convolutions: the largest of an op's input and output tensors,
    at most WORKSPACE_LIMIT (docs/estimates.md, "Scratch memory"); recorded as the
    node's temp_memory_size, which the loader reads into temp_bytes."""
    stats = {ns.node_name: ns for dev in step_stats.dev_stats for ns in dev.node_stats}
    ops = {op.name: op for op in graph.get_operations()}
    count = 0
    for name, ns in stats.items():
        op = ops.get(name)
        if op is None or op.type not in grappler_ops.WORKSPACE_OPS:
            continue
        largest = max(_tensor_bytes(t, stats) for t in list(op.inputs) + list(op.outputs))
        ns.memory_stats.temp_memory_size = min(largest, grappler_ops.WORKSPACE_LIMIT)
        count += 1
    return {"workspace_ops": count}


def _tensor_flops(op, stats) -> int:
    """FLOPs of a MatMul, BatchMatMul or 2-D convolution op (0 if a shape is unknown)."""
    if op.type.startswith("Conv"):
        return _conv_flops(op, stats)
    a = op.inputs[0].shape
    out = _num_elements(op.outputs[0], stats)
    if out is None or a.rank is None:
        return 0
    adjoint = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
    inner = a[-2] if adjoint else a[-1]
    return 2 * out * inner if inner is not None else 0


def _count_types(ops, names) -> dict:
    counts = {}
    for name in names:
        counts[ops[name].type] = counts.get(ops[name].type, 0) + 1
    return dict(sorted(counts.items()))


def _fallback_ns(op, stats, bandwidth_gbs, conv_gflops) -> float:
    inputs = resources = 0
    for tensor in op.inputs:
        if tensor.dtype.name == "resource":
            resources += _variable_bytes(tensor)
        else:
            inputs += _tensor_bytes(tensor, stats)
    outputs = sum(_tensor_bytes(t, stats) for t in op.outputs)
    flops = _conv_flops(op, stats) if op.type in grappler_ops.CONV3D_OPS else 0
    return grappler_ops.fallback_ns(inputs, outputs, resources, op.type, bandwidth_gbs, flops, conv_gflops)


def _conv_flops(op, stats) -> int:
    """FLOPs of a 2-D or 3-D convolution or either gradient (0 if a shape is unknown)."""
    forward_output = op.outputs[0] if op.type in ("Conv2D", "Conv3D") else op.inputs[2]
    kernel = op.outputs[0] if "BackpropFilter" in op.type else op.inputs[1]
    count = _num_elements(forward_output, stats)
    if count is None or not kernel.shape.is_fully_defined():
        return 0
    return grappler_ops.conv_flops(count, kernel.shape.as_list())


def _num_elements(tensor, stats):
    """Elements of a tensor: its static shape, else the shape Grappler inferred (None if unknown)."""
    count = tensor.shape.num_elements()
    ns = stats.get(tensor.op.name)
    if count is None and ns is not None and tensor.value_index < len(ns.output):
        dims = [d.size for d in ns.output[tensor.value_index].tensor_description.shape.dim]
        count = int(np.prod(dims)) if dims and min(dims) >= 0 else None
    return count


def _tensor_bytes(tensor, stats) -> int:
    """Size Grappler inferred for the tensor, else its static size, else 0."""
    ns = stats.get(tensor.op.name)
    if ns is not None and tensor.value_index < len(ns.output):
        size = ns.output[tensor.value_index].tensor_description.allocation_description.requested_bytes
        if size > 0:
            return int(size)
    count = tensor.shape.num_elements()
    try:
        return int(count * tensor.dtype.size) if count is not None else 0
    except TypeError:         # string/variant tensors have no fixed element size
        return 0


def _variable_bytes(handle) -> int:
    """Bytes of the variable behind a resource tensor (through Identity/Enter/...)."""
    op = handle.op
    while op.type != "VarHandleOp" and op.inputs:
        op = op.inputs[0].op
    if op.type != "VarHandleOp":
        return 0
    count = tf.TensorShape(op.get_attr("shape")).num_elements()
    return int(count * op.get_attr("dtype").size) if count is not None else 0


def _set_time(ns, nanos: float) -> None:
    whole = int(round(nanos))
    ns.op_start_rel_nanos = 0
    ns.op_end_rel_nanos = ns.all_end_rel_nanos = whole
    ns.op_start_rel_micros = 0
    ns.op_end_rel_micros = ns.all_end_rel_micros = int(round(nanos / 1e3))


def _fill_micros(step_stats) -> None:
    """Grappler fills only the nanosecond fields; mirror them in the microsecond ones
    for readers that use those (rounded: sub-microsecond GPU ops read as 0 there)."""
    for dev in step_stats.dev_stats:
        for ns in dev.node_stats:
            ns.all_start_micros = ns.all_start_nanos // 1000
            ns.op_start_rel_micros = int(round(ns.op_start_rel_nanos / 1e3))
            ns.op_end_rel_micros = int(round(ns.op_end_rel_nanos / 1e3))
            ns.all_end_rel_micros = int(round(ns.all_end_rel_nanos / 1e3))
