"""Running the real workflow from tests."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "tiny.yaml"


def command(*args) -> tuple[list[str], dict]:
    """The command line and environment that run Snakemake on this repository's workflow."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), *args], env


def snakemake(*args, cwd, check=True, timeout=900):
    """Run Snakemake on this repository's workflow in ``cwd``; raise with its output tail when it fails."""
    cmd, env = command(*args)
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc
