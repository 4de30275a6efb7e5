"""Running the real workflow from tests."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "tiny.yaml"


def snakemake(*args, cwd, check=True, timeout=900):
    """Run Snakemake on this repository's workflow in ``cwd``; raise with its output tail when it fails."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc
