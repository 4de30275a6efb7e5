"""Where does a training workload's isolated excess sit? Per op type and phase, Σ count x isolated cost (rotation,
the engine call measured in the rotation taken out, as the pipeline) against Σ count x in-situ cost, one process,
batch 1. Prints the rotation and interleaved references, the sums per phase and the op types with the largest
excess, and a SUMMARY per model.

    python benchmarks/training_split.py MODEL [MODEL ...] [--threads 2]
    python benchmarks/training_split.py --smoke   # a tiny model, short caps: a functional check
"""
from __future__ import annotations

import argparse

import pandas as pd

from _common import model_entries, prepare, summary, workload_configs
import _smoke


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="a tiny model, caps of milliseconds (a functional check, "
                                                         "in seconds)")
    args = ap.parse_args()
    if args.smoke:
        args.models = [_smoke.MODEL]
    elif not args.models:
        ap.error("name at least one model")
    prepare(args.threads)

    from opcost.measure.engine import engine_cost
    from opcost.measure.insitu import profile_insitu
    from opcost.measure.profile import ProfileSettings, profile_configs
    from opcost.measure.timing import TimingSettings

    for model in args.models:
        cfg = _smoke.config() if args.smoke else model_entries([model], None)
        wl, layers, configs = workload_configs(model, 1, "training", cfg["models"][model])
        rotation = []
        iso, _ = profile_configs(configs, cfg["models"], "cpu", "float32", ProfileSettings.from_config(cfg),
                                       on_e2e=lambda row, _: rotation.append(row))
        engine_s = engine_cost(iso)  # measured in the rotation and taken out of each backward row
        ins, _, interleaved = profile_insitu(wl, TimingSettings.from_config(cfg["insitu"]["timing"]), "cpu")
        count = layers.set_index("config_id")["count"]

        def per_type(df: pd.DataFrame) -> pd.Series:
            d = df[df["status"] == "ok"]
            return (d["trimmed_mean_s"] * d["config_id"].map(count)).groupby([d["op_type"], d["phase"]]).sum() * 1e3

        tab = pd.concat({"isolated_ms": per_type(iso), "insitu_ms": per_type(ins)}, axis=1).fillna(0.0)
        tab["excess_ms"] = tab["isolated_ms"] - tab["insitu_ms"]
        ref_ms = float(rotation[0]["trimmed_mean_s"].iloc[0]) * 1e3
        inter_ms = float(interleaved["trimmed_mean_s"].iloc[0]) * 1e3
        print(f"== {model} training b1: engine {engine_s * 1e6:.1f} us per call; rotation reference {ref_ms:.3f} ms; "
              f"interleaved {inter_ms:.3f} ms")
        phase = tab.groupby(level="phase").sum()
        print(phase.round(3).to_string())
        print(tab.sort_values("excess_ms", ascending=False).head(8).round(3).to_string())
        summary(model=model, isolated_ms=float(tab["isolated_ms"].sum()), insitu_ms=float(tab["insitu_ms"].sum()),
                rotation_ms=ref_ms, interleaved_ms=inter_ms,
                forward_excess_ms=float(phase["excess_ms"].get("forward", 0.0)),
                backward_excess_ms=float(phase["excess_ms"].get("backward", 0.0)))


if __name__ == "__main__":
    main()
