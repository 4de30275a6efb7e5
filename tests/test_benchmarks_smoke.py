"""The benchmark scripts run as documented: their cheap modes, in a process of their own."""
import subprocess
import sys

from tests.helpers import ROOT


def test_reliability_smoke_finds_nothing_bad(tmp_path):
    proc = subprocess.run([sys.executable, "benchmarks/reliability.py", "--smoke", "--out", tmp_path], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("SUMMARY cases="), proc.stdout[-3000:]
    found = dict(kv.split("=") for kv in last.split()[1:])
    assert int(found["cases"]) >= 10 and found["bad"] == "0" and found["silently_wrong"] == "0", proc.stdout
