"""Real Snakemake runs: the whole chain on a tiny config, a dry run and lint of the default config, bad input."""
import gzip
import json
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.helpers import ROOT, TINY, snakemake


def test_tiny_config_runs_to_figures(tiny_run):
    figs = sorted(p.name for p in (tiny_run / "results" / "figures").glob("*.png"))
    assert figs == ["breakdown.png", "consistency.png", "convergence.png", "coplace.png", "energy.png",
                    "placement.png", "predicted_vs_measured.png", "spread.png", "tiers.png",
                    "trace_breakdown.png", "trace_overheads.png", "unseen.png"]
    assert all((tiny_run / "results" / "figures" / f).stat().st_size > 10_000 for f in figs)
    pred = pd.read_parquet(tiny_run / "results" / "validation" / "predictions.parquet")
    workloads = {("tiny_dlrm", "inference"), ("tiny_dlrm", "training"), ("mlp", "inference")}
    sources = ("isolated", "insitu", "isolated+overhead", "insitu+overhead")
    assert set(zip(pred["model"], pred["mode"], pred["source"])) == {
        (m, mode, src) for m, mode in workloads for src in sources}
    assert (pred["configs_measured"] == pred["configs"]).all() and (pred["calls_covered"] == 1.0).all()
    assert (pred["predicted_s"] > 0).all() and (pred["measured_s"] > 0).all()
    # each source against the e2e time of its own minutes: the rotations' model iterations, the interleaved ones
    assert (pred["reference"] == pred["source"].map(lambda s: "interleaved" if "insitu" in s else "rotation")).all()


def test_each_prediction_says_how_far_its_reference_moved_between_rotations(tiny_run):
    """`reference_spread`: for the rotation references, the workload's largest over its smallest end-to-end time
    among the rotations that timed it, - 1 (the machine's noise over the run); missing for other references and for
    the never-profiled model; shown in the run's summary."""
    pred = pd.read_parquet(tiny_run / "results" / "validation" / "predictions.parquet")
    e2e = pd.read_parquet(tiny_run / "results" / "db" / "e2e.parquet")
    col = {"trimmed_mean": "trimmed_mean_s", "median": "median_s"}[pred["statistic"].iloc[0]]
    rot = e2e[e2e["method"] == "rotation"]
    spread = rot.groupby(["model", "batch", "mode"])[col].agg(lambda t: t.max() / t.min() - 1 if len(t) > 1 else None)
    rotated = pred[pred["reference"] == "rotation"]
    assert len(rotated) == 6 and pred.loc[pred["reference"] != "rotation", "reference_spread"].isna().all()
    timed_twice = 0
    for r in rotated.itertuples():
        want = spread[(r.model, r.batch, r.mode)]
        if pd.isna(want):
            assert pd.isna(r.reference_spread)
        else:
            timed_twice += 1
            assert r.reference_spread == pytest.approx(want) and r.reference_spread >= 0
    assert timed_twice > 0  # the tiny config's two profiling chunks each time every workload
    unseen = pd.read_parquet(tiny_run / "results" / "validation" / "unseen.parquet")
    assert unseen["reference_spread"].isna().all()
    text = (tiny_run / "results" / "summary.txt").read_text()
    for r in rotated[rotated["source"] == "isolated+overhead"].dropna(subset=["reference_spread"]).itertuples():
        line = next(x for x in text.splitlines() if x.strip().startswith(f"{r.model}/{r.mode}/b{r.batch} "))
        assert f" {r.reference_spread * 100:.0f}% " in line, line


def test_a_model_never_profiled_is_predicted_and_checked(tiny_run):
    """tiny.yaml's `predict_only` model: extracted and timed end to end, never profiled; predicted from the run's
    database (its Linear layers, of a width no workload has, estimated by the cost model)."""
    unseen = pd.read_parquet(tiny_run / "results" / "validation" / "unseen.parquet")
    assert list(zip(unseen["model"], unseen["source"])) == [("mlp_wide", "estimated")]
    r = unseen.iloc[0]
    assert 0 < r["estimated_share"] <= 1 and r["low_s"] <= r["predicted_s"] <= r["high_s"]
    # timed in turn with the run's first two profiled models at their smallest batch, its time read in the
    # database's minutes: per control, its reference times the rounds' median ratio; the median of the two
    from opcost.analysis.predict import references

    own = pd.read_parquet(tiny_run / "results" / "e2e" / "mlp_wide" / "inference_b2.parquet")
    turn = own[own["method"] == "control"]
    assert list(turn["control"]) == ["tiny_dlrm/inference/b2", "mlp/inference/b2"]
    assert (turn["vs_control"] > 0).all() and (turn["n"] >= 4).all()
    refs = references(pd.read_parquet(tiny_run / "results" / "db" / "e2e.parquet"), "cpu", "isolated")
    scaled = [v * refs[(m, 2, "inference")][0] for m, v in zip(["tiny_dlrm", "mlp"], turn["vs_control"])]
    assert r["reference"] == "control" and r["measured_s"] == pytest.approx(np.median(scaled))
    layers = pd.read_parquet(tiny_run / "results" / "db" / "layers.parquet")
    meas = pd.read_parquet(tiny_run / "results" / "db" / "measurements.parquet")
    assert "mlp_wide" not in set(layers["model"]) and "mlp_wide" not in set(meas.get("workload", []))
    from opcost.analysis.training import cache_path

    assert cache_path(tiny_run / "results" / "db").exists()  # the fitted model, in the cache, not in the database
    # timed as a check only: no plain process beside it (the profiled models have one)
    e2e = lambda m: pd.read_parquet(tiny_run / "results" / "e2e" / m / "inference_b2.parquet")  # noqa: E731
    assert "plain" not in set(e2e("mlp_wide")["method"]) and "plain" in set(e2e("mlp")["method"])
    # its error kept beside the database, for the intervals of models never profiled
    from opcost.analysis import calibration

    cal = pd.read_parquet(tiny_run / "results" / "db" / "calibration.parquet")
    assert list(cal["model"]) == ["mlp_wide"]
    assert cal["log_error"].iloc[0] == pytest.approx(np.log(r["predicted_s"] / r["measured_s"]))
    assert cal["database"].iloc[0] == calibration.fingerprint(tiny_run / "results" / "db")
    assert len(calibration.rows_for(tiny_run / "results" / "db", cal["conditions"].iloc[0], "inference")) == 1


def test_a_broken_model_is_named_and_the_others_complete(tiny_run):
    # tiny.yaml's `broken` model raises when built: each stage records it and writes its outputs empty, the run
    # completes for the others (figures and predictions above) and ends with the list of failures
    fail = pd.read_csv(tiny_run / "results" / "failures.tsv", sep="\t")
    why = "model broken: tests.tiny_models:explode raised RuntimeError: this factory always fails"
    assert sorted(fail["stage"]) == sorted(["extract", "e2e", "e2e_tier", "insitu", "trace", "coplace"])
    assert (fail["workload"] == "broken/inference/b2").all() and (fail["reason"] == why).all()
    assert fail["config_id"].isna().all()
    assert pd.read_parquet(tiny_run / "results" / "layers" / "broken" / "inference_b2.parquet").empty
    assert "broken" not in set(pd.read_parquet(tiny_run / "results" / "db" / "e2e.parquet")["model"])
    out = (tiny_run / "snakemake.out").read_text()
    end = out[out.rindex("steps (100%) done"):]  # the last lines a user sees
    assert "Failures: 1 workload(s) failed, 0 configuration failure(s):\nFAILED broken/inference/b2 (extract, " in end
    assert why in end


def test_the_run_ends_with_its_summary(tiny_run):
    """results/summary.txt, also the last lines printed: per workload predicted against measured with its error and
    coverage, the loop's outcome, the never-profiled model, the failures, where the figures are."""
    text = (tiny_run / "results" / "summary.txt").read_text()
    out = (tiny_run / "snakemake.out").read_text()
    assert text.strip() in out[out.rindex("steps (100%) done"):]
    pred = pd.read_parquet(tiny_run / "results" / "validation" / "predictions.parquet")
    mine = pred[pred["source"] == "isolated+overhead"]
    for r in mine.itertuples():
        line = next(x for x in text.splitlines() if x.strip().startswith(f"{r.model}/{r.mode}/b{r.batch} "))
        assert f"{r.predicted_s * 1e3:.3f}" in line and f"{r.error * 100:+.1f}%" in line, line
    loop = json.loads((tiny_run / "results" / "loop" / "summary.json").read_text())
    assert f"after {len(loop)} iteration(s)" in text and loop[-1]["stop_reason"] in text
    assert any(x.strip().startswith("mlp_wide/inference/b2 ") for x in text.splitlines())  # predict_only
    assert "FAILED broken/inference/b2" in text and "results/figures/ (open breakdown.png first)" in text
    meas = pd.read_parquet(tiny_run / "results" / "db" / "measurements.parquet")
    iso = meas.loc[meas["source"] == "isolated", "timestamp"]
    assert f"Measured (UTC): operators {iso.min()} to {iso.max()}; end to end " in text  # one run's minutes
    assert f"--configfile {TINY} --report report.html" in text  # the report of this run, not of the default config
    assert "Costs hold in opcost's measuring process (glibc keeping freed memory, 1 thread(s) pinned)." in text
    e2e = pd.read_parquet(tiny_run / "results" / "db" / "e2e.parquet")
    plain = e2e[(e2e["model"] == "mlp") & (e2e["mode"] == "inference") & (e2e["method"] == "plain")].iloc[0]
    gap = plain["vs_opcost"] - 1  # a plain child process's blocks of iterations timed in turn with the e2e job's
    assert "A plain PyTorch process (glibc's default allocator, threads not pinned) took, against it (blocks" in text
    assert f"mlp/inference/b2 {gap * 100:+.1f}%" in text
    own = pred[(pred["model"] == "mlp") & (pred["source"] == "isolated+overhead")].iloc[0]
    assert own["error_plain"] == pytest.approx((1 + own["error"]) / plain["vs_opcost"] - 1)  # against the user's clock
    line = next(x for x in text.splitlines() if x.strip().startswith("mlp/inference/b2 "))
    assert f"{own['error_plain'] * 100:+.1f}%" in line, line


def test_database_holds_every_configuration_once(tiny_run):
    db = tiny_run / "results" / "db"
    configs = pd.read_parquet(db / "configs.parquet")
    meas = pd.read_parquet(db / "measurements.parquet")
    iso = meas[(meas["source"] == "isolated") & (meas["phase"] == "forward") & (meas["placement"] == "default")]
    assert sorted(iso["config_id"]) == sorted(configs["config_id"])  # each measured exactly once over the chunks
    assert (iso["cache"] == "fresh").all() and (iso["calls_per_sample"] == 1).all()  # in rotation (cpu default)
    ins = meas[(meas["source"] == "insitu") & (meas["phase"] == "forward")]
    of_models = configs["models"].map(lambda ms: not all(m.startswith("sweep-") for m in json.loads(ms)))
    assert set(ins["config_id"]) == set(configs.loc[of_models, "config_id"])  # in-situ: every model's configuration
    assert (~of_models).sum() == 3  # tiny.yaml's three Linear sweep points, profiled like the rest
    assert set(meas.loc[meas["phase"] == "backward", "mode"]) == {"training"}
    assert (meas["status"] == "ok").all() and meas["energy_j"].isna().all() and (meas["meter"] == "none").all()
    assert (meas["ci_low_s"] <= meas["median_s"]).all() and (meas["median_s"] <= meas["ci_high_s"]).all()
    assert meas["cpu_model"].notna().all() and (meas["threads"] == 1).all()
    assert meas["cpus"].str.fullmatch(r"\d+").all()  # affinity: pin, threads 1: one CPU
    e2e = pd.read_parquet(db / "e2e.parquet")
    assert sorted(e2e.loc[e2e["method"] != "rotation", "method"]) == ["dedicated"] * 3 + ["interleaved"] * 3 + [
        "plain"] * 3 + ["tier"] * 3  # tier: each workload with its memory on dram_b (tests/data/tiny.yaml)
    rot = e2e[e2e["method"] == "rotation"]  # one row per workload and profiling job that rotated it
    assert set(zip(rot["model"], rot["mode"])) == {("tiny_dlrm", "inference"), ("tiny_dlrm", "training"),
                                                   ("mlp", "inference")} | {
        (m, "inference") for m in ("sweep-Linear-f4-r3", "sweep-Linear-f12-r3", "sweep-Linear-f24-r3")}
    assert (e2e.loc[e2e["method"] != "rotation", "n"] >= 5).all() and (rot["n"] >= 1).all()


def test_placements_are_measured_verified_and_a_missing_tier_skipped(tiny_run):
    tiers = json.loads((tiny_run / "results" / "placement" / "tiers.json").read_text())
    assert tiers["usable"] == ["dram", "dram_b"] and "NUMA node 63 not present" in tiers["skipped"]["absent"]
    meas = pd.read_parquet(tiny_run / "results" / "db" / "measurements.parquet")
    iso = meas[meas["source"] == "isolated"]
    assert (iso.groupby(["config_id", "phase"])["placement"].agg(lambda p: (p == "default").sum()) == 1).all()
    iso = iso[iso["placement"] != "default"]  # the rotation row aside: the placements, back-to-back
    assert iso["cache"].str.startswith("cold").all()
    per_config = iso.groupby(["config_id", "phase"])["placement"].nunique()
    assert (per_config == 2).all()  # max_per_config: all on dram, all on dram_b
    assert iso["placement_ok"].all() and not iso["placement"].str.contains("absent").any()
    assert (iso.groupby(["config_id", "phase"])["baseline"].sum() == 1).all()
    pred = pd.read_parquet(tiny_run / "results" / "validation" / "predictions.parquet")
    assert set(pred["placement"]) == {"baseline"}


def test_the_whole_model_on_each_tier_adds_up_the_measured_slowdowns(tiny_run):
    from opcost.analysis.tiers import verified, whole_model

    res = tiny_run / "results"
    placed = pd.read_parquet(res / "validation" / "tiers.parquet")
    pred = pd.read_parquet(res / "validation" / "predictions.parquet")
    iso = pred[pred["source"] == "isolated"].set_index(["model", "mode", "batch"])
    # one row per validated workload on the one slower usable tier, forward and backward slowdowns all measured
    assert sorted(zip(placed["model"], placed["mode"])) == sorted(iso.index.droplevel("batch"))
    assert set(placed["tier"]) == {"dram_b"} and set(placed["scenario"]) == {"activations"}
    # every slowdown measured, but for a backward cost netted to 0 of the autograd engine's on the fast tier alone
    assert (placed.loc[placed["mode"] == "inference", "measured_share"] == 1).all()
    assert (placed["measured_share"] > 0.5).all()
    assert set(placed["placement"]) == {"in:dram_b out:dram_b"}  # params fixed: weights stay on the fast tier
    for r in placed.itertuples():  # the all-fast-tier time is the validated isolated prediction's operator sum
        assert r.baseline_s == pytest.approx(iso.loc[(r.model, r.mode, r.batch), "predicted_s"], rel=1e-9)
    # mlp by hand: Σ count x cost in rotation x (median all on dram_b / median all on dram, back to back)
    meas = pd.read_parquet(res / "db" / "measurements.parquet")
    layers = pd.read_parquet(res / "layers" / "mlp" / "inference_b2.parquet")
    m = meas[(meas["source"] == "isolated") & (meas["phase"] == "forward")].set_index(["config_id", "placement"])
    want = 0.0
    for cid, count, ins, outs in zip(layers["config_id"], layers["count"], layers["inputs"], layers["outputs"]):
        rows = m.loc[cid]
        slow = rows[rows.index.str.contains("dram_b")]
        fast = rows[rows["baseline"].astype(bool) & (rows.index != "default")]
        assert len(slow) == 1 and len(fast) == 1
        want += count * rows.loc["default", "trimmed_mean_s"] * slow["median_s"].iloc[0] / fast["median_s"].iloc[0]
    got = placed.set_index("model").loc["mlp"]
    assert got["predicted_s"] == pytest.approx(want, rel=1e-9)
    # a configuration whose placement failed its check takes its op type's median slowdown, and says so
    linear = meas[(meas["op_type"] == "Linear") & meas["placement"].str.contains("dram_b")]["config_id"].iloc[0]
    broken = meas.copy()
    broken.loc[(broken["config_id"] == linear) & broken["placement"].str.contains("dram_b"), "placement_ok"] = False
    assert not verified(broken[(broken["config_id"] == linear) & (broken["placement"] != "default")
                               & broken["placement"].str.contains("dram_b")]).any()  # backward rows too
    layer_rows = pd.concat([pd.read_parquet(p) for p in (res / "layers").glob("*/*.parquet")])
    layer_rows = layer_rows[layer_rows["model"].isin(set(iso.index.get_level_values("model")))]
    again = whole_model(layer_rows, broken, "cpu").set_index(["model", "mode"])
    hit = {(mo, mode) for mo, mode in zip(layer_rows["model"], layer_rows["mode"])
           if linear in set(layer_rows[(layer_rows["model"] == mo) & (layer_rows["mode"] == mode)]["config_id"])}
    # against the same workloads unbroken (a training backward netted to 0 has no slowdown of its own there either)
    share = whole_model(layer_rows, meas, "cpu").set_index(["model", "mode"])["measured_share"]
    for key, r in again.iterrows():
        assert np.isfinite(r["predicted_s"])
        if key in hit:
            assert r["measured_share"] < share[key]
        else:
            assert r["measured_share"] == pytest.approx(share[key], rel=1e-9)
    # timed end to end with the job's memory on dram_b, weights on dram, every tensor found where it was asked to be
    e2e = pd.read_parquet(res / "db" / "e2e.parquet")
    runs = e2e[e2e["method"] == "tier"].set_index(["model", "mode"])
    assert runs.loc[("mlp", "inference"), "placement"] == "in:dram_b;w:dram;out:dram_b"
    assert runs.loc[("tiny_dlrm", "training"), "placement"].endswith(";w:dram;out:dram_b")
    assert runs["placement_verified"].str.contains("dram_b").all()  # node 0 answers to both of its tier names
    assert placed["measured_slowdown"].notna().all() and placed["placement_ok"].all()
    assert (placed["error"] == placed["slowdown"] / placed["measured_slowdown"] - 1).all()
    absent = pd.read_parquet(res / "e2e" / "mlp" / "inference_b2.on_absent.parquet")
    assert absent.empty  # a tier this host lacks: no run, the reason in its log
    assert "NUMA node 63 not present" in (tiny_run / "logs" / "e2e" / "mlp" / "inference_b2.on_absent.log").read_text()
    assert "The whole model on each slower memory tier" in (res / "summary.txt").read_text()


def test_simultaneous_placement_profiling_covers_every_placement(tiny_run):
    meas = pd.read_parquet(tiny_run / "results" / "db" / "measurements.parquet")
    co = meas[meas["source"] == "coplace"]
    iso = meas[(meas["source"] == "isolated") & (meas["phase"] == "forward") & (meas["placement"] != "default")]
    assert len(co) and co["placement_ok"].all() and (co["status"] == "ok").all()
    configs = pd.read_parquet(tiny_run / "results" / "db" / "configs.parquet")
    of_models = ~configs["models"].str.contains('"sweep-')  # sweep points are profiled, not run as models
    modules = set(configs[of_models].query("scope == 'module' and mode == 'inference'")["config_id"])
    # every placement of every inference leaf-module configuration, as measured in isolation, is covered co-placed
    want = set(zip(iso["config_id"], iso["placement"])) & {(c, p) for c in modules for p in iso["placement"]}
    assert want <= set(zip(co["config_id"], co["placement"]))
    summary = json.loads((tiny_run / "results" / "coplace" / "mlp" / "inference_b2.summary.json").read_text())
    assert summary["skipped"] is None and summary["rounds"] >= 2 and summary["placement_mismatches"] == 0
    skipped = json.loads((tiny_run / "results" / "coplace" / "tiny_dlrm" / "training_b2.summary.json").read_text())
    assert "inference only" in skipped["skipped"]


def test_traces_are_recorded_analysed_and_feed_the_overhead_aware_prediction(tiny_run):
    trace_dir = tiny_run / "results" / "trace" / "mlp"
    with gzip.open(trace_dir / "inference_b2.json.gz", "rt") as f:
        assert any(e.get("name") == "opcost_iteration" for e in json.load(f)["traceEvents"])  # opens in Perfetto
    iters = pd.read_parquet(trace_dir / "inference_b2.iterations.parquet")
    assert len(iters) == 3 and (iters["cpu_idle_s"] > 0).all()  # tiny.yaml: trace.iterations 3
    ov = pd.read_parquet(trace_dir / "inference_b2.overheads.parquet")
    # a CPU trace has gaps between ops, no launches; + the replay's gaps, and the glue timed without the profiler
    assert set(ov["kind"]) == {"T1", "T1r", "G"}
    training = pd.read_parquet(tiny_run / "results" / "trace" / "tiny_dlrm" / "training_b2.overheads.parquet")
    assert set(training["kind"]) == {"T1", "T1r"}  # training too: paired with a replay of its forward calls (no G:
    # the replay holds no backward to time the model's step against)
    assert "<profiler>" not in set(training["op_type"])  # the replay's gaps hold the profiler's cost: no calibration
    pred = pd.read_parquet(tiny_run / "results" / "validation" / "predictions.parquet").set_index(
        ["model", "mode", "batch", "source"])
    for source in ("isolated", "insitu"):
        plain = pred.loc[("mlp", "inference", 2, source)]
        with_ov = pred.loc[("mlp", "inference", 2, f"{source}+overhead")]
        assert pd.notna(with_ov["overhead_s"]) and pd.isna(plain["overhead_s"])  # signed: T1 - T1r
        assert with_ov["predicted_s"] == pytest.approx(plain["predicted_s"] + with_ov["overhead_s"])


def test_completed_run_has_nothing_left_to_do(tiny_run):
    proc = snakemake("--configfile", str(TINY), "-n", cwd=tiny_run)
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_report_collects_figures(tiny_run):
    snakemake("--configfile", str(TINY), "--report", "report.html", cwd=tiny_run)
    html = (tiny_run / "report.html").read_text(errors="ignore")
    figs = [p.name for p in (tiny_run / "results" / "figures").glob("*.png")]
    assert len(figs) >= 10 and all(f in html for f in figs)  # every figure, with the figures' caption
    assert "unattributed time" in html  # the caption
    for table in ("predictions.tsv", "summary.txt"):  # the predictions, the loop's and the run's summaries
        assert table in html


def test_default_config_dry_run(tmp_path):
    shutil.copytree(ROOT / "config", tmp_path / "config")
    proc = snakemake("-n", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    shipped = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    n = len(shipped["models"]) * len(shipped["batch_sizes"])  # workloads: 3 models x batch 1 and 8
    unseen = sum(len(e.get("batch_sizes", shipped["batch_sizes"])) for e in shipped["predict_only"].values())
    assert unseen >= 2  # the models an interval of a model never profiled rests on
    for rule, count in (("extract", n + unseen), ("e2e", n + unseen), ("alone", n), ("insitu", n), ("trace", n),
                        ("profile", shipped["profile"]["chunks"]), ("placement_tiers", 1), ("figures", 1)):
        assert any(line.split() == [rule, str(count)] for line in out.splitlines()), (rule, out[-2000:])


def test_lint_is_clean(tmp_path):
    shutil.copytree(ROOT / "config", tmp_path / "config")  # run outside the repository, whose files another test checks
    proc = snakemake("--lint", cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Lints for" not in proc.stdout + proc.stderr


def test_config_error_is_one_line_naming_the_key(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    cfg["batch_sizes"] = ["two"]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = snakemake("--configfile", "bad.yaml", "-n", cwd=tmp_path, check=False)
    assert proc.returncode != 0
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "config: batch_sizes[0]" in ln]
    assert lines and "'two' is not of type 'integer'" in lines[0]
    assert not (tmp_path / "results").exists()
