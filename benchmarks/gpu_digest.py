"""Digest of a workflow run's results for the GPU check (benchmarks/gpu_check.sh): tiers found, measurements per
placement with their median slowdown against the fast tier, the whole model on each slower tier, energy coverage,
predictions against end-to-end runs, trace breakdowns, failures. Usage: python benchmarks/gpu_digest.py [RESULTS_DIR]"""
import json
import sys
from pathlib import Path

import pandas as pd

root = Path(sys.argv[1] if len(sys.argv) > 1 else "results")
pd.set_option("display.width", 200, "display.max_columns", 20, "display.max_rows", 60)


def show(title, path, fn):
    print(f"--- {title} ({path})")
    try:
        fn(path)
    except Exception as e:  # a digest shows what exists; a missing stage is reported, not fatal
        print(f"  unavailable: {type(e).__name__}: {e}")


def tiers(p):
    print(json.dumps(json.loads(Path(p).read_text()), indent=1)[:1500])


def measurements(p):
    m = pd.read_parquet(p)
    print(f"  rows {len(m)}; devices {sorted(m['device'].unique())}; gpu {m['gpu_name'].dropna().unique()[:1]}")
    print(m.groupby(["status", "placement_ok"], dropna=False).size().to_string())
    ok = m[m["median_s"].notna()]
    # a timing path that reads nothing shows as rows of 0 s (isolated backward rows less the engine call may be 0)
    print("  rows per source, and those whose median is 0 s or less:")
    print(ok.groupby(["source", "phase"]).agg(rows=("median_s", "size"),
                                              at_most_0=("median_s", lambda s: int((s <= 0).sum()))).to_string())
    print("  per placement: rows, with energy, median of median_s")
    print(ok.groupby("placement").agg(rows=("median_s", "size"), energy=("energy_j", "count"),
                                      median_s=("median_s", "median")).to_string())
    e = ok["energy_j"].dropna()
    print(f"  energy_j: {len(e)} of {len(ok)} rows; min {e.min() if len(e) else 'n/a'}; meter "
          f"{ok['meter'].dropna().unique()}; power_w median {ok['power_w'].median()}")


def slowdowns(p):
    m = pd.read_parquet(p)
    m = m[m["median_s"].notna() & (m["source"] == "isolated")]
    key = ["config_id", "phase"]
    base = m[m["baseline"]].groupby(key)["median_s"].min().rename("base_s")
    other = m[~m["baseline"]].join(base, on=key)
    other["slowdown"] = other["median_s"] / other["base_s"]
    print("  slowdown against the all-fast placement (median_s ratio), by placement:")
    print(other.groupby("placement")["slowdown"].describe(percentiles=[0.1, 0.5, 0.9]).head(20).to_string())


def predictions(p):
    v = pd.read_parquet(p)
    cols = [c for c in ("model", "mode", "batch", "source", "reference", "predicted_s", "measured_s", "error",
                        "predicted_j", "measured_j") if c in v]
    print(v[cols].to_string(index=False))


def tier_costs(p):
    v = pd.read_parquet(p)
    cols = [c for c in ("model", "mode", "batch", "tier", "placement", "baseline_s", "predicted_s", "slowdown",
                        "measured_share", "measured_slowdown", "error") if c in v]
    print(v[cols].to_string(index=False))


def overheads(p):
    for f in sorted(Path(p).glob("*/*.op_types.parquet")):
        t = pd.read_parquet(f)
        print(f"  {f.parent.name}/{f.name}: {len(t)} op types, cpu {t['cpu_s'].sum()*1e3:.3f} ms, "
              f"device {t['device_s'].sum()*1e3:.3f} ms, launches {int(t['launches'].sum())}")
    for f in sorted(Path(p).glob("*/*.overheads.parquet")):
        print(f"  {f.parent.name}/{f.name}:\n" + pd.read_parquet(f).to_string(index=False))


def failures(p):
    print(Path(p).read_text()[:3000] or "  (none)")


show("tiers", root / "placement/tiers.json", tiers)
show("measurements", root / "db/measurements.parquet", measurements)
show("placements", root / "db/measurements.parquet", slowdowns)
show("whole model per tier", root / "validation/tiers.parquet", tier_costs)
show("predictions", root / "validation/predictions.parquet", predictions)
show("unseen", root / "validation/unseen.parquet", predictions)
show("consistency", root / "validation/consistency.parquet",
     lambda p: print(pd.read_parquet(p).describe().to_string()))
show("trace", root / "trace", overheads)
show("failures", root / "failures.tsv", failures)
print("--- figures:", sorted(x.name for x in (root / "figures").glob("*")) if (root / "figures").exists() else "none")
