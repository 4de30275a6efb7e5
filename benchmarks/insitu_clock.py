"""Does the in-situ sum add up to the iterations it was timed in, with each clock? Side by side, one process.

For each workload: in-situ profiling (opcost.measure.insitu.profile_insitu) twice, alternating, once with the clock of
the timing core (:class:`opcost.measure.timing.Clock`: on CUDA, events recorded on the stream and read after the
iteration) and once with a clock that synchronises the device at every mark;
each gives Σ count × in-situ cost against the unobserved iterations interleaved with its timed ones. On a CPU the
two clocks are the same (perf_counter); the comparison is for a GPU, where a synchronisation costs a few
microseconds at every operator boundary. Prints a table and one SUMMARY line.

    python benchmarks/insitu_clock.py --device cuda [--models resnet18 tiny_bert tiny_dlrm] [--batches 8]
                                      [--training tiny_dlrm] [--threads 2] [--repeats 2]
    python benchmarks/insitu_clock.py --smoke   # a tiny model, short caps: a functional check
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from _common import model_entries, prepare, summary
import _smoke


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", nargs="+", default=["resnet18", "tiny_bert", "tiny_dlrm"])
    ap.add_argument("--training", nargs="*", default=["tiny_dlrm"], help="models also run in training")
    ap.add_argument("--batches", nargs="+", type=int, default=[8])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2, help="alternations of the two clocks per workload")
    ap.add_argument("--smoke", action="store_true", help="a tiny model at batch 1 in both modes, one repeat, caps "
                                                         "of milliseconds (a functional check, in seconds)")
    args = ap.parse_args()
    if args.smoke:
        args.models, args.training, args.batches, args.repeats = [_smoke.MODEL], [_smoke.MODEL], [1], 1
    prepare(args.threads)

    import torch

    from opcost.analysis.predict import predict
    from opcost.measure import insitu
    from opcost.measure.timing import Clock, TimingSettings, clock_for
    from opcost.model.extract import extract
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    class SyncClock(Clock):
        """A perf_counter reading after a device synchronisation at every mark."""

        def mark(self):
            torch.cuda.synchronize()
            return time.perf_counter()

    cfg = _smoke.config() if args.smoke else model_entries(sorted(set(args.models) | set(args.training)), None)
    settings = TimingSettings.from_config(cfg["insitu"]["timing"])
    clocks = {"events": lambda device: clock_for(device),
              "sync": lambda device: SyncClock() if str(device).startswith("cuda") else Clock()}
    rows, t0 = [], time.perf_counter()
    workloads = [(m, "inference") for m in args.models] + [(m, "training") for m in args.training]
    for model, mode in workloads:
        for batch in args.batches:
            wl = make_workload(load_model(model, cfg["models"][model], args.device), batch, mode)
            layers = extract(wl)
            errs: dict[str, list[float]] = {k: [] for k in clocks}
            for _ in range(args.repeats):
                for name, make in clocks.items():
                    insitu.clock_for = make  # the one place profile_insitu takes its clock from
                    meas, _, e2e = insitu.profile_insitu(wl, settings, args.device)
                    by = predict(layers, meas, e2e, args.device, sources=("insitu",)).set_index("source")
                    errs[name].append(float(by.loc["insitu", "error"]))
            insitu.clock_for = clock_for
            rows.append({"model": model, "mode": mode, "batch": batch,
                         **{f"err_{k}": float(np.median(v)) for k, v in errs.items()}})
            print(pd.DataFrame([rows[-1]]).to_string(index=False, header=len(rows) == 1, float_format="%.3f"),
                  flush=True)
    table = pd.DataFrame(rows)
    print()
    print(table.to_string(index=False, float_format="%.3f"))
    summary(workloads=len(table), device=args.device,
            median_abs_err_events=float(table["err_events"].abs().median()),
            median_abs_err_sync=float(table["err_sync"].abs().median()),
            max_abs_err_events=float(table["err_events"].abs().max()),
            max_abs_err_sync=float(table["err_sync"].abs().max()), wall_s=time.perf_counter() - t0)


if __name__ == "__main__":
    main()
