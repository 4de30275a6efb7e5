"""benchmarks/decode.py runs as documented: its --smoke mode (one-layer llama, qwen2 and gpt2), in a process of its
own, ending with its SUMMARY line."""
import math
import subprocess
import sys

from tests.helpers import ROOT


def test_decode_benchmark_smoke_ends_with_a_summary():
    proc = subprocess.run([sys.executable, "benchmarks/decode.py", "--smoke"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("SUMMARY workloads="), proc.stdout[-3000:]
    found = dict(kv.split("=") for kv in last.split()[1:])
    # three families x batches 1 and 3 at context 16; each model at 64 (b1, b3), at b2 (context 16) and at both
    assert found["workloads"] == "6" and found["extrapolated"] == "12", last
    for key in ("median_abs_err_rot", "median_abs_err_ded", "median_abs_err_context", "median_abs_err_batch",
                "median_abs_err_extrap"):
        assert math.isfinite(float(found[key])), last
