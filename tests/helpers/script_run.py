"""Run one of tests/helpers' scripts in a subprocess (K logical CPU devices must be
set before TensorFlow initialises) and read the JSON line it prints last."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def script_facts(script, root, timeout=900) -> dict:
    """The last stdout line of `python tests/helpers/SCRIPT ROOT`, parsed; its stderr's
    tail in the assertion when it fails."""
    proc = subprocess.run([sys.executable, os.path.join(HERE, script), str(root)],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
