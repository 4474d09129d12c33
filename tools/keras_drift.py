"""How far a placed Keras model's losses drift from the unplaced model's, against how
far a kernel change moves the unplaced model's own losses.

Runs tests/helpers/keras_plan_script.py's `drift` mode (the four models of
tests/helpers/keras_models.py planned with pardnn.keras on 4 logical CPU devices,
then STEPS training steps placed and unplaced) in two child processes: one with
TensorFlow's oneDNN kernels on (TF_ENABLE_ONEDNN_OPTS=1, TF's default on x86), one
with them off (=0). Prints, per model, the largest relative difference of a step's
loss between placed and unplaced (each setting; the unplaced model traced by Keras
for the batch's size, and traced as the placed step is, with the batch size
unknown) and between the unplaced runs of the two settings (the kernel change).

    python -m tools.keras_drift [STEPS]
"""

import json
import os
import subprocess
import sys
import tempfile

from tools.commit_line import ROOT, print_commit

SCRIPT = os.path.join(ROOT, "tests", "helpers", "keras_plan_script.py")


def run(onednn: str, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="keras_drift_") as root:
        env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": onednn}
        proc = subprocess.run([sys.executable, SCRIPT, "drift", root, str(steps)], capture_output=True,
                              text=True, env=env)
    if proc.returncode:
        sys.exit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def largest(a, b) -> float:
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def main():
    print_commit()
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    on, off = run("1", steps), run("0", steps)
    print(f"largest relative loss difference over {steps} steps (4 logical CPU devices); placed against "
          f"unplaced traced by Keras (static batch) and traced as the placed step is (unknown batch)")
    print(f"{'model':<12} {'oneDNN on: static':>18} {'unknown batch':>14} {'oneDNN off: static':>19} "
          f"{'unknown batch':>14} {'unplaced, on/off':>17} {'first loss equal':>17}")
    for name in on:
        first = all(run_[name]["placed"][0] == run_[name]["unplaced"][0] for run_ in (on, off))
        cells = [largest(run_[name]["placed"], run_[name][kind]) for run_ in (on, off)
                 for kind in ("unplaced", "unplaced_relaxed")]
        print(f"{name:<12} {cells[0]:>18.3g} {cells[1]:>14.3g} {cells[2]:>19.3g} {cells[3]:>14.3g} "
              f"{largest(on[name]['unplaced'], off[name]['unplaced']):>17.3g} {str(first):>17}")


if __name__ == "__main__":
    main()
