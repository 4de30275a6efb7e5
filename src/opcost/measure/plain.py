"""A workload timed as a plain PyTorch process runs it, beside opcost's own process.

opcost's measuring processes keep glibc from returning freed memory to the OS (:mod:`opcost.measure.memory`) and
may pin their threads (``affinity: pin``): the conditions under which operator costs and their end-to-end checks
hold. A user who times the model with a script of their own runs it in a plain process: glibc's default allocator
(fresh pages, and page faults, for large activations), threads unpinned. The dedicated end-to-end job therefore
also times the workload in a child process started with none of opcost's settings but the thread count (`e2e`
method `plain`), so that the gap between the two is a measured, reported number.

Run as ``python -m opcost.measure.plain REQUEST.json OUT_PREFIX``: the request holds the model's name and config
entry, batch, mode, device, dtype, threads and timing settings; the child writes ``OUT_PREFIX.e2e.parquet`` and
``OUT_PREFIX.samples.parquet``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import pandas as pd

METHOD = "plain"
CONDITIONS = "glibc's default allocator, threads not pinned"  # what differs from opcost's measuring processes
PROCESS = "glibc keeping freed memory, {threads} thread(s)"  # the measuring processes the costs hold in


def time_plain(name: str, spec: dict, batch: int, mode: str, config: dict, settings) -> tuple[pd.DataFrame,
                                                                                              pd.DataFrame]:
    """(`e2e` row, `samples`) of the workload timed in a plain child process with ``settings`` (a
    :class:`~opcost.measure.timing.TimingSettings`), on ``config``'s device, dtype and threads."""
    from opcost import io, tables

    request = {"name": name, "spec": spec, "batch": int(batch), "mode": mode, "device": config["device"],
               "dtype": config["dtype"], "threads": int(config["threads"]), "timing": asdict(settings)}
    with tempfile.TemporaryDirectory(prefix="opcost-plain-") as tmp:
        req = Path(tmp) / "request.json"
        req.write_text(json.dumps(request))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "OMP_", "GOMP_", "KMP_"))}
        proc = subprocess.run([sys.executable, "-m", "opcost.measure.plain", str(req), str(Path(tmp) / "out")],
                              capture_output=True, text=True, env=env, cwd=os.getcwd())
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"the plain process failed: {tail}")
        return (io.read_parquet(Path(tmp) / "out.e2e.parquet", tables.E2E),
                io.read_parquet(Path(tmp) / "out.samples.parquet", tables.SAMPLES))


def plain_gaps(e2e: pd.DataFrame) -> dict[str, float]:
    """Per workload (``model/mode/bN``): its newest `plain` iteration time over its newest `dedicated` one, minus 1
    (how much longer a plain process takes than opcost's)."""
    out = {}
    for (model, mode, batch), g in e2e.groupby(["model", "mode", "batch"], sort=False):
        newest = {m: r.sort_values("timestamp")["median_s"].iloc[-1] for m, r in g.groupby("method")}
        if METHOD in newest and "dedicated" in newest and newest["dedicated"] > 0:
            out[f"{model}/{mode}/b{int(batch)}"] = float(newest[METHOD] / newest["dedicated"] - 1)
    return out


def _child(request_path: str, out_prefix: str) -> None:
    import torch

    from opcost import io, tables
    from opcost.measure.e2e import e2e_frames
    from opcost.measure.timing import TimingSettings, measure
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    req = json.loads(Path(request_path).read_text())
    torch.set_num_threads(req["threads"])
    wl = make_workload(load_model(req["name"], req["spec"], req["device"], req["dtype"]), req["batch"], req["mode"])
    m = measure(wl.step, TimingSettings(**req["timing"]), req["device"])
    row, samples = e2e_frames((req["name"], req["batch"], req["mode"]), m, METHOD, req["device"])
    io.write_parquet(row, f"{out_prefix}.e2e.parquet", tables.E2E)
    io.write_parquet(samples.assign(source="plain"), f"{out_prefix}.samples.parquet", tables.SAMPLES)


if __name__ == "__main__":
    _child(*sys.argv[1:3])
