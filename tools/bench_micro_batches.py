"""Throughput of micro-batched steps on a DGX, emulated (issue 50; docs/benchmarks.md,
"Micro-batches").

    python -m tools.bench_micro_batches [--d 2048] [--blocks 8] [--heads 16] [--seq 512]
        [--batch 16] [--devices dgx-h100:8] [--micro 1,2,4,8] [--work DIR] [--csv FILE]

A GPT-style Keras model of its own layers (pre-norm causal self-attention and a 4x MLP
on [batch, seq, d], token and position embeddings, an untied head, cross-entropy on the
next token) trained by a custom step with Keras' Adam, planned shape-only with
`pardnn.keras.plan(..., step=, micro_batches=M)` and costs estimated for dgx-h100.
For each M of `--micro` and each cluster (one device at M = 1, the baseline, then
`--devices`), it prints the emulated step (report.json's makespan), the samples per
second relative to one device running the unsplit batch, the largest per-device peak,
the graph's nodes and the time the plan took, and each order of
pardnn.pipeline.schedule emulated on the plan's placement (its step and the share of
the devices' time idle), and the GPipe and RaNNC-style baselines placed on the same
micro-batched graph (`--algorithm gpipe`, `rannc`). `--auto` instead times
`micro_batches="auto"` against one `pardnn place` of the unsplit step's profile. Each plan runs in a child process
(`python -m tools.bench_micro_batches --one ...`), one at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from tools.commit_line import ROOT, print_commit, write_rows

from pardnn.base.errors import UserError
from pardnn.pipeline.schedule import SCHEDULES

BASELINES = ("gpipe", "rannc")


def build_gpt(d, blocks, heads, seq, vocab):
    """(model, optimizer) of the GPT-style model, built for [batch, seq] int32 tokens."""
    import keras
    from keras import layers

    class Block(layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.norm1, self.norm2 = layers.LayerNormalization(), layers.LayerNormalization()
            self.attention = layers.MultiHeadAttention(heads, d // heads)
            self.up, self.down = layers.Dense(4 * d, activation="gelu"), layers.Dense(d)

        def call(self, x):
            h = self.norm1(x)
            x = x + self.attention(h, h, use_causal_mask=True)
            return x + self.down(self.up(self.norm2(x)))

    keras.utils.set_random_seed(0)
    tokens = keras.Input((seq,), dtype="int32")
    x = layers.Embedding(vocab, d)(tokens) + layers.Embedding(seq, d)(keras.ops.arange(seq))
    for _ in range(blocks):
        x = Block()(x)
    model = keras.Model(tokens, layers.Dense(vocab)(layers.LayerNormalization()(x)))
    return model, keras.optimizers.Adam(1e-4)


def one(args) -> dict:
    """Plan one (cluster, M) in this process; the row."""
    import pardnn.tf.quiet_import
    import pardnn.keras
    import tensorflow as tf
    from tools.keras_models import custom_step as train_step
    spec = tf.TensorSpec([args.batch, args.seq], tf.int32)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        plan = pardnn.keras.plan(lambda: build_gpt(args.d, args.blocks, args.heads, args.seq, args.vocab),
                                 (spec, spec), devices=args.one, step=train_step, micro_batches=args.m,
                                 directory=os.path.join(work, "plan"), estimate="dgx-h100", verbose=0)
        report = plan.report
        orders = scheduled(os.path.join(work, "plan"), args.one)
    return {"devices": args.one, "micro_batches": args.m, "makespan_us": round(report["makespan_us"], 1),
            "peak_bytes": max(report["peak_memory_bytes"]), "fits": report["feasible"],
            "nodes": report["num_nodes"], "plan_s": round(time.perf_counter() - t0, 1), **orders}


def auto(args) -> dict:
    """micro_batches="auto" timed against one `pardnn place` of the unsplit step's profile
    (the issue's yardstick), in this process: the counts tried, the one kept, both walls."""
    import pardnn.tf.quiet_import
    import pardnn.keras
    import tensorflow as tf
    from pardnn.cli import main as cli
    from tools.keras_models import custom_step as train_step
    spec = tf.TensorSpec([args.batch, args.seq], tf.int32)
    build = lambda: build_gpt(args.d, args.blocks, args.heads, args.seq, args.vocab)   # noqa: E731
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        unsplit = pardnn.keras.plan(build, (spec, spec), devices=args.devices, step=train_step, estimate="dgx-h100",
                                    directory=os.path.join(work, "one"), verbose=0)
        t0 = time.perf_counter()
        assert cli(["place", os.path.join(unsplit.directory, "profile"), "--devices", args.devices,
                    "-o", os.path.join(work, "placed")]) == 0
        place_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        chosen = pardnn.keras.plan(build, (spec, spec), devices=args.devices, step=train_step, estimate="dgx-h100",
                                   micro_batches="auto", directory=os.path.join(work, "auto"), verbose=1)
        auto_s = time.perf_counter() - t0
    return {"kept": chosen.micro_batches, "place_s": round(place_s, 1), "auto_s": round(auto_s, 1),
            "ratio": round(auto_s / place_s, 1)}


def scheduled(plan_dir, devices) -> dict:
    """Each order of pardnn.pipeline.schedule emulated on the plan's placement (its step
    in us and bubble share, by name), and the baselines (`--algorithm gpipe`, `rannc`)
    placed on the same graph: their step, bubble and whether they fit."""
    from pardnn.hardware import parse_devices
    from pardnn.io.placement import read_csv
    from pardnn.pipeline.load import load_cost_graph
    from pardnn.pipeline.place import place
    from pardnn.pipeline.schedule import schedules
    graph, _ = load_cost_graph(os.path.join(plan_dir, "profile"))
    cluster = parse_devices(devices)
    device = read_csv(os.path.join(plan_dir, "placement.csv"), graph, cluster)
    row = {}
    for s in schedules(graph, cluster, device):
        row[f"{s.name}_us"] = round(s.makespan_us, 1)
        row[f"{s.name}_bubble"] = round(s.bubble, 3)
    for name in BASELINES:
        try:
            report = place(graph, cluster, name)[1].to_json()
            row[f"{name}_us"] = round(report["makespan_us"], 1)
            row[f"{name}_bubble"] = round(report.get("bubble", 0.0), 3)
        except UserError as exc:         # it does not fit
            row[f"{name}_us"], row[f"{name}_bubble"] = None, str(exc)[:60]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=2048)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--devices", default="dgx-h100:8")
    ap.add_argument("--micro", default="1,2,4,8")
    ap.add_argument("--work", default=None)
    ap.add_argument("--csv", metavar="FILE")
    ap.add_argument("--auto", action="store_true", help="time micro_batches=\"auto\" against one pardnn place")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--m", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args)))
        return 0
    print_commit()
    if args.auto:
        print(json.dumps(auto(args)))
        return 0
    knobs = [f"--{k}={getattr(args, k)}" for k in ("d", "blocks", "heads", "seq", "vocab", "batch")]
    if args.work:
        knobs.append(f"--work={args.work}")
    rows, base = [], None
    print("devices M makespan_us samples_per_s_x peak_GiB fits nodes plan_s | per order: step_us (bubble)")
    for devices, m in [("dgx-h100:1", 1)] + [(args.devices, int(m)) for m in args.micro.split(",")]:
        out = subprocess.run([sys.executable, "-m", "tools.bench_micro_batches", *knobs, f"--one={devices}",
                              f"--m={m}"], cwd=ROOT, capture_output=True, text=True)
        if out.returncode != 0:
            print(devices, m, "failed:", out.stderr.strip().splitlines()[-1:], flush=True)
            continue
        row = json.loads(out.stdout.strip().splitlines()[-1])
        base = base or row["makespan_us"]
        row["throughput_x"] = round(base / row["makespan_us"], 3)
        rows.append(row)
        orders = " ".join(f"{name} {row[name + '_us']} ({row[name + '_bubble']})" for name in SCHEDULES + BASELINES)
        print(devices, m, row["makespan_us"], f"{row['throughput_x']:.2f}x", f"{row['peak_bytes'] / 2**30:.2f}",
              row["fits"], row["nodes"], row["plan_s"], "|", orders, flush=True)
    if args.csv and rows:
        write_rows(args.csv, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
