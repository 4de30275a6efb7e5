"""The database answers from itself: merge (idempotent), show, predict naming what is missing."""
import io as io_module
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from opcost import database, io, tables
from opcost.errors import OpcostError


def test_merge_is_idempotent_and_deduplicates(tiny_run, tmp_path):
    db = tiny_run / "results" / "db"
    once = database.merge([db], tmp_path / "once")
    twice = database.merge([db, db], tmp_path / "twice")
    again = database.merge([tmp_path / "twice", db], tmp_path / "again")
    for name in database.DB_TABLES:
        assert len(once[name]) == len(twice[name]) == len(again[name]) > 0, name
        pd.testing.assert_frame_equal(once[name], again[name])
    assert len(once["measurements"]) == len(pd.read_parquet(db / "measurements.parquet"))


def test_merge_combines_machines(tiny_run, tmp_path):
    db = database.read_db(tiny_run / "results" / "db")
    other = tmp_path / "other"
    for name, table in database.DB_TABLES.items():
        df = db[name]
        if name in ("measurements", "e2e"):
            df = df.assign(host="other-host", timestamp="2026-01-01T00:00:00+00:00")
        io.write_parquet(df, other / f"{name}.parquet", table)
    merged = database.merge([tiny_run / "results" / "db", other], tmp_path / "merged")
    assert len(merged["measurements"]) == 2 * len(db["measurements"])
    assert len(merged["configs"]) == len(db["configs"])
    cmd = [sys.executable, "-m", "opcost.cli", "db", "merge", str(tiny_run / "results" / "db"), str(other), "--out",
           str(tmp_path / "cli")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    fits = [ln for ln in out.splitlines() if ln.startswith("cost model ")]
    assert len(fits) == 2 and all("held-out median |error| per configuration law " in ln and ", estimate " in ln
                                  for ln in fits), out
    assert all(": inference: law" in ln for ln in fits), out  # the method chosen per mode


def test_predict_from_the_database_estimates_what_it_lacks(tiny_run, tmp_path):
    from opcost.analysis import estimate

    db = database.read_db(tiny_run / "results" / "db")
    layers = estimate.workload_layers(db, "mlp", 2, "inference")
    full = estimate.predict_workload(db, layers)
    assert full.estimated_share == 0 and full.predicted_s > 0 and full.measured_s > 0
    linear = db["measurements"]["op_type"] == "Linear"
    partial = estimate.predict_workload({**db, "measurements": db["measurements"][~linear]}, layers)
    est = partial.layers[partial.layers["method"] != "measured"]
    assert set(est["op_type"]) == {"Linear"} and 0 < partial.estimated_share < 1
    assert partial.low_s <= partial.predicted_s <= partial.high_s


def test_a_module_class_the_op_table_does_not_list_is_estimated_as_the_aten_calls_it_runs(tiny_run):
    """A leaf module of the model's own class, never measured, has no law, twin or family: its estimate is the sum
    of the aten calls it runs (three more scalings cost three more calls), not the global law's one pass over the
    same input and output."""
    from opcost.analysis import composed, estimate

    db = database.read_db(tiny_run / "results" / "db")

    def costed(passes: int) -> pd.Series:
        entry = {"model": "tests.tiny_models:make_passes", "kwargs": {"passes": passes}, "input_shapes": [[8]]}
        layers = estimate.workload_layers(db, f"passes{passes}", 2, "inference", entry)
        return estimate.predict_workload(db, layers).layers.set_index("op_type").loc["Passes"]

    one, four = costed(1), costed(4)
    assert one["method"] == four["method"] == composed.METHOD
    assert four["cost_s"] > 1.5 * one["cost_s"]  # 4 scalings and a relu against 1 and a relu, all alike in size
    for row in (one, four):
        assert row["low_s"] < row["cost_s"] < row["high_s"]


def test_an_interval_is_never_narrower_than_the_timings_it_rests_on(tiny_run):
    """A database of one measured workload: nothing is estimated and no other workload shows the method's error or
    the overhead's range, yet the prediction's interval spans the spread of the end-to-end times the run took of it
    (each rotation's, the dedicated run's): never of zero width."""
    from opcost.analysis import estimate
    from opcost.analysis.predict import DEFAULT_STATISTIC, REFERENCES, STATISTICS

    db = database.read_db(tiny_run / "results" / "db")
    own = lambda t: t[(t["model"] == "mlp") & (t["batch"] == 2) & (t["mode"] == "inference")]  # noqa: E731
    one = {**db, "e2e": own(db["e2e"]), "overheads": own(db["overheads"])}
    p = estimate.predict_workload(one, estimate.workload_layers(one, "mlp", 2, "inference"))
    assert p.estimated_share == 0
    e2e = one["e2e"]
    times = e2e.loc[e2e["method"].isin(REFERENCES["isolated"]), STATISTICS[DEFAULT_STATISTIC]].astype(float)
    assert len(times) >= 2 and times.max() > times.min()
    rel = times / times.median() - 1
    assert p.low_s <= p.predicted_s * (1 + rel.quantile(0.05)) * (1 + 1e-9)
    assert p.high_s >= p.predicted_s * (1 + rel.quantile(0.95)) * (1 - 1e-9)
    assert p.low_s < p.predicted_s < p.high_s


def test_the_estimated_part_of_an_interval_spans_a_models_held_out_error(tiny_run):
    """A prediction's estimated operators span the 90% range of a model's held-out summed error, E x [e^-h, e^h],
    as a whole, whatever their own ranges; an overhead from the workload's own trace adds no other workload's range,
    one from the database's median per call adds that median's 10-90% range over the workload's calls; never
    narrower than the timings it rests on. Without a model-level error (a small database), the estimates' own
    ranges: ends added within an op type, in quadrature across."""
    from opcost.analysis import estimate, overhead_sources
    from opcost.analysis.calibration import ModelSpread
    from opcost.analysis.interval import Overhead, workload_interval
    from opcost.analysis.predict import DEFAULT_STATISTIC

    spread = ModelSpread(0.2, 5, "five models' errors")
    db = database.read_db(tiny_run / "results" / "db")
    used, _ = estimate.conditions(db["measurements"])
    rows = pd.DataFrame({"op_type": ["Linear", "Linear", "ReLU", "add"], "phase": "forward",
                         "count": [2, 1, 3, 1], "cost_s": [1e-3, 2e-3, 1e-4, 5e-5],
                         "low_s": [0.5e-3, 1e-3, 0.5e-4, 5e-5], "high_s": [2e-3, 4e-3, 3e-4, 5e-5],
                         "method": ["law", "law", "family", "measured"]})
    rows["total_s"] = rows["count"] * rows["cost_s"]
    estimated = float(rows["total_s"].iloc[:3].sum())
    centre = float(rows["total_s"].sum()) + 1e-3
    times = overhead_sources.every_time(db, used, DEFAULT_STATISTIC)
    assert overhead_sources.method_error(db, used, "inference", DEFAULT_STATISTIC, 0.0, times) is None
    floor = overhead_sources.timing_spread(times, "unseen", "inference")
    assert floor is not None

    def expect(down, up):
        return min(centre - down, centre * (1 + floor[0])), max(centre + up, centre * (1 + floor[1]))

    own = workload_interval(db, used, rows, Overhead(1e-3, "trace now", (1e-6, 0.0, 3e-6)), DEFAULT_STATISTIC,
                            "inference", "unseen", spread)
    assert own.basis == "the estimated part within x1.22 either way, as five models' errors"
    assert own.centre == pytest.approx(centre)
    assert (own.low, own.high) == pytest.approx(expect(estimated * (1 - np.exp(-0.2)), estimated * np.expm1(0.2)))
    assert own.widest == "Linear"
    calls = float(rows["count"].sum())
    median = workload_interval(db, used, rows, Overhead(1e-3, "all models", (1e-6, 0.0, 3e-6)), DEFAULT_STATISTIC,
                               "inference", "unseen", spread)
    assert (median.low, median.high) == pytest.approx(expect(
        np.hypot(estimated * (1 - np.exp(-0.2)), 1e-6 * calls), np.hypot(estimated * np.expm1(0.2), 2e-6 * calls)))
    composed = workload_interval(db, used, rows, Overhead(1e-3, "trace now", (1e-6, 0.0, 3e-6)), DEFAULT_STATISTIC,
                                 "inference", "unseen", None)
    linear_down, linear_up = 2 * 0.5e-3 + 1e-3, 2 * 1e-3 + 2e-3  # one law: its ends add up
    relu_down, relu_up = 3 * 0.5e-4, 3 * 2e-4
    assert (composed.low, composed.high) == pytest.approx(expect(np.hypot(linear_down, relu_down),
                                                                 np.hypot(linear_up, relu_up)))
    assert composed.basis.startswith("each estimate's own held-out range")


def test_cli_show_and_predict(tiny_run):
    db = str(tiny_run / "results" / "db")
    show = subprocess.run([sys.executable, "-m", "opcost.cli", "db", "show", "--db", db, "--op", "Linear"],
                          capture_output=True, text=True, check=True).stdout
    assert "Linear" in show and "EmbeddingBag" not in show
    pred = subprocess.run([sys.executable, "-m", "opcost.cli", "predict", "mlp", "--batch", "2", "--db", db],
                          capture_output=True, text=True, check=True).stdout
    assert pred.startswith("mlp inference b2 (host ") and "isolated costs, trimmed_mean): predicted" in pred
    assert "Linear" in pred and "0% estimated" in pred
    # what the answer rests on and the accuracy table's figure for that kind of answer (a measured model with neither
    # convolutions nor attention, an MLP: the row of the benchmark's four measured models, one of them a DLRM)
    from opcost.report import trust

    assert pred.strip().splitlines()[-1] == trust.expect("cnn_inference")
    assert "in a plain process of yours (a script's own): " in pred and "timed in turn)" in pred
    med = subprocess.run([sys.executable, "-m", "opcost.cli", "predict", "mlp", "--batch", "2", "--db", db,
                          "--statistic", "median"], capture_output=True, text=True, check=True).stdout
    assert "isolated costs, median): predicted" in med and med != pred
    assert list(tables.LAYERS.names) == list(pd.read_parquet(tiny_run / "results" / "db" / "layers.parquet").columns)


def test_the_database_answers_a_question_about_one_configuration(tiny_run):
    """The measured cost of one Linear configuration, by its parameters and input shape, with the statistic the
    predictions use: no join of `measurements` and `configs` by hand, no parsing of JSON."""
    import json

    db = database.read_db(tiny_run / "results" / "db")
    linear = db["configs"][db["configs"]["op_type"] == "Linear"]
    widths = sorted({json.loads(p)["in_features"] for p in linear["params"]})
    assert len(widths) >= 2  # mlp (16) and the sweep points (4, 12, 24), tiny_dlrm's MLPs
    one = database.show(db, database.Filter(op="Linear", source="isolated", params={"in_features": str(widths[0])}))
    assert len(one) and (one["params"].map(lambda p: json.loads(p)["in_features"]) == widths[0]).all()
    assert (one["cost_s"] == one.merge(db["measurements"], on=["config_id", "phase", "source", "placement"])
            ["trimmed_mean_s"].to_numpy()).all()
    shape = one["shapes"].iloc[0].split(", ")[0]
    by_shape = database.show(db, database.Filter(op="Linear", shape=shape.replace("x", ",")), statistic="median")
    assert len(by_shape) and by_shape["shapes"].str.split(", ").map(lambda s: shape in s).all()
    assert set(by_shape["config_id"]) < set(database.show(db, database.Filter(op="Linear"))["config_id"])
    out = subprocess.run([sys.executable, "-m", "opcost.cli", "db", "show", "--db", str(tiny_run / "results" / "db"),
                          "--op", "Linear", "--param", f"in_features={widths[0]}", "--phase", "forward", "--csv"],
                         capture_output=True, text=True, check=True).stdout
    rows = pd.read_csv(io_module.StringIO(out))
    assert len(rows) and set(rows["phase"]) == {"forward"} and set(rows["config_id"]) <= set(one["config_id"])


def test_a_database_from_an_older_opcost_still_reads_and_merges(tiny_run, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    added = ["placement_verified", "placement_ok", "baseline", "cache", "cpus"]  # columns added after version 1
    for name in database.DB_TABLES:
        df = pd.read_parquet(tiny_run / "results" / "db" / f"{name}.parquet")
        df.drop(columns=[c for c in added if c in df.columns]).to_parquet(old / f"{name}.parquet")
    meas = io.read_parquet(old / "measurements.parquet", tables.MEASUREMENTS)
    assert meas["baseline"].isna().all() and meas["cpus"].isna().all()
    merged = database.merge([old, old], tmp_path / "merged")  # idempotent on old rows too
    assert len(merged["measurements"]) == len(meas)
    assert (merged["measurements"]["run"] == database.run_id(database.read_db(old))).all()  # named on merging
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"nonsense": [1]}).to_parquet(bad)
    with pytest.raises(OpcostError, match="bad.parquet: table measurements: extra columns"):
        io.read_parquet(bad, tables.MEASUREMENTS)


def test_predictions_prefer_the_rotation_row_over_the_back_to_back_reference():
    from opcost import tables
    from opcost.analysis.predict import costed_layers

    def row(cache, placement, seconds, ts):
        return {**dict.fromkeys(tables.MEASUREMENTS.names), "config_id": "c", "op_type": "Linear",
                "mode": "inference", "source": "isolated", "phase": "forward", "status": "ok", "device": "cpu",
                "placement": placement, "baseline": True, "cache": cache, "median_s": seconds,
                "trimmed_mean_s": seconds, "timestamp": ts}

    meas = tables.frame(tables.MEASUREMENTS, [row("fresh", "default", 2.0, "2026-01-01T00:00:00"),
                                              row("cold:4", "in:dram;w:dram;out:dram", 1.0, "2026-01-02T00:00:00")])
    layers = tables.frame(tables.LAYERS, [{**dict.fromkeys(tables.LAYERS.names), "model": "m", "batch": 1,
                                           "mode": "inference", "config_id": "c", "count": 3}])
    assert costed_layers(layers, meas, "cpu")["total_s"].tolist() == [6.0]  # the rotation row, though older
    older = meas.assign(cache="warm")  # without a rotation row: the newest baseline row
    assert costed_layers(layers, older, "cpu")["total_s"].tolist() == [3.0]


def test_each_source_is_checked_against_the_e2e_time_of_its_own_minutes():
    """Isolated costs against the model iterations timed in their rotations (pooled over profiling jobs, weighted
    by the part of the prediction each rotation timed; by n in older rows), in-situ costs against the interleaved
    iterations; the dedicated run where neither exists."""
    from opcost import tables
    from opcost.analysis.predict import predict, references

    def e2e(method, seconds, n, ts, model="m", timed=None):
        return {**dict.fromkeys(tables.E2E.names), "model": model, "batch": 1, "mode": "inference",
                "method": method, "device": "cpu", "placement": "default", "median_s": seconds,
                "trimmed_mean_s": seconds, "n": n, "timestamp": ts, "timed_s": timed}

    runs = tables.frame(tables.E2E, [e2e("dedicated", 10.0, 50, "2026-01-01T00:00:00"),
                                     e2e("rotation", 8.0, 10, "2026-01-01T00:01:00", timed=7.5),
                                     e2e("rotation", 12.0, 30, "2026-01-01T00:02:00", timed=2.5),
                                     e2e("interleaved", 11.0, 20, "2026-01-01T00:03:00"),
                                     e2e("dedicated", 7.0, 50, "2026-01-01T00:00:00", model="other"),
                                     e2e("rotation", 8.0, 30, "2026-01-01T00:01:00", model="old"),
                                     e2e("rotation", 12.0, 10, "2026-01-01T00:02:00", model="old")])
    assert references(runs, "cpu", "isolated") == {("m", 1, "inference"): (9.0, "rotation"),  # (8*7.5+12*2.5)/10
                                                   ("other", 1, "inference"): (7.0, "dedicated"),
                                                   ("old", 1, "inference"): (9.0, "rotation")}  # (8*30+12*10)/40
    assert references(runs, "cpu", "insitu")[("m", 1, "inference")] == (11.0, "interleaved")

    def meas(source, seconds):
        return {**dict.fromkeys(tables.MEASUREMENTS.names), "config_id": "c", "op_type": "Linear",
                "mode": "inference", "source": source, "phase": "forward", "status": "ok", "device": "cpu",
                "placement": "default", "workload": "m/inference/b1", "median_s": seconds,
                "trimmed_mean_s": seconds, "timestamp": "2026-01-01T00:00:00"}

    layers = tables.frame(tables.LAYERS, [{**dict.fromkeys(tables.LAYERS.names), "model": "m", "batch": 1,
                                           "mode": "inference", "config_id": "c", "count": 3}])
    pred = predict(layers, tables.frame(tables.MEASUREMENTS, [meas("isolated", 3.0), meas("insitu", 3.3)]), runs,
                   "cpu").set_index("source")
    assert pred.loc["isolated", ["measured_s", "reference", "error"]].tolist() == [9.0, "rotation", 0.0]
    assert pred.loc["insitu", "reference"] == "interleaved"
    assert pred.loc["insitu", "error"] == pytest.approx(9.9 / 11.0 - 1)


def test_means_add_up_where_medians_do_not():
    """Per-call samples of two operators and the iterations made of them (each iteration: one call of each): the
    sum of the trimmed means is the iterations' trimmed mean, the sum of the medians misses their median."""
    import numpy as np

    from opcost import tables
    from opcost.analysis.predict import predict
    from opcost.measure.timing import Measurement

    a, b = np.array([1.0, 2.0, 3.0, 10.0]), np.array([3.0, 1.0, 2.0, 1.0])  # skewed: a long right tail
    key = {"mode": "inference", "device": "cpu", "placement": "default", "timestamp": "2026-01-01T00:00:00"}
    meas = tables.frame(tables.MEASUREMENTS, [
        {**dict.fromkeys(tables.MEASUREMENTS.names), **key, "config_id": c, "op_type": c, "source": "isolated",
         "phase": "forward", "status": "ok", **Measurement(x, 1, 0.0).stats()} for c, x in (("a", a), ("b", b))])
    e2e = tables.frame(tables.E2E, [{**dict.fromkeys(tables.E2E.names), **key, "model": "m", "batch": 1,
                                     "method": "dedicated", **Measurement(a + b, 1, 0.0).stats()}])
    layers = tables.frame(tables.LAYERS, [{**dict.fromkeys(tables.LAYERS.names), "model": "m", "batch": 1,
                                           "mode": "inference", "config_id": c, "count": 1} for c in "ab"])
    mean = predict(layers, meas, e2e, "cpu").set_index("source").loc["isolated"]
    assert mean["statistic"] == "trimmed_mean"
    assert (mean["predicted_s"], mean["measured_s"]) == pytest.approx((5.75, 5.75))
    med = predict(layers, meas, e2e, "cpu", statistic="median").set_index("source").loc["isolated"]
    assert (med["predicted_s"], med["measured_s"]) == pytest.approx((4.0, 4.5))  # 2.5 + 1.5 vs median of 3,4,5,11
    with pytest.raises(ValueError, match="statistic 'mean'"):
        predict(layers, meas, e2e, "cpu", statistic="mean")


def test_cli_statistic_choices_are_the_config_schema_ones():
    """The CLI spells the statistics out (it imports neither the schema nor pandas at start-up): they must stay
    the schema's and opcost.analysis.predict's."""
    from opcost.analysis.predict import DEFAULT_STATISTIC, STATISTICS
    from opcost.config import schema

    key = schema()["properties"]["statistic"]
    assert key["enum"] == list(STATISTICS) and key["default"] == DEFAULT_STATISTIC
    text = " ".join(subprocess.run([sys.executable, "-m", "opcost.cli", "predict", "--help"], capture_output=True,
                                   text=True, check=True).stdout.split())
    assert "{" + ",".join(key["enum"]) + "}" in text and f"default: {DEFAULT_STATISTIC})" in text


def _second_run(db_dir, out, drop_op_type=None):
    """A second run of the tiny config on the same host, written to ``out``: the run's database with every
    timestamp an hour later and every timing twice as long (``drop_op_type``: without that op type's measurements,
    as a run that did not profile it). A real second run (the run directory copied, its journal deleted,
    ``snakemake --forceall``) gives a database of exactly this shape: the same host facts, configurations,
    workloads and end-to-end methods, later timestamps, other timings (on this project's 2-core VM: mlp b2 measured
    0.029 ms, then 0.028 ms); this copy costs no second run of the workflow and makes the runs' timings tell apart."""
    db = database.read_db(db_dir)

    def later(ts):
        return ts.map(lambda t: (pd.Timestamp(t) + pd.Timedelta(hours=1)).isoformat())

    for name, table in database.DB_TABLES.items():
        df = db[name]
        if name in database.RUN_TABLES:
            seconds = [c for c in df.columns if c.endswith("_s") and c != "cost_s"]
            df = df.assign(timestamp=later(df["timestamp"]), **{c: df[c] * 2 for c in seconds})
        if name == "measurements" and drop_op_type:
            df = df[df["op_type"] != drop_op_type]
        io.write_parquet(df, out / f"{name}.parquet", table)
    return out


def test_merge_into_an_existing_database_keeps_its_rows(tiny_run, tmp_path):
    """`--out` naming a database merges into it (the probe's 79 rows became 34); merging again adds nothing; a
    directory of other files or a file is refused in one line, nothing written."""
    import shutil

    db = tiny_run / "results" / "db"
    second = _second_run(db, tmp_path / "second")
    out = tmp_path / "out"
    shutil.copytree(db, out)
    before = database.read_db(out)
    merged = database.merge([second], out)
    assert len(merged["measurements"]) == 2 * len(before["measurements"])
    assert len(merged["e2e"]) == 2 * len(before["e2e"]) and len(merged["configs"]) == len(before["configs"])
    kept = database.read_db(out)["measurements"]
    first_run = database.run_id(before)
    assert set(database.runs(kept)) == {first_run, database.run_id(database.read_db(second))}
    assert len(kept[kept["run"] == first_run]) == len(before["measurements"])  # the database's own rows, named
    cmd = [sys.executable, "-m", "opcost.cli", "db", "merge", str(second), str(db), "--out", str(out)]
    again = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert again.returncode == 0 and f"measurements: {len(merged['measurements'])} rows" in again.stdout
    pd.testing.assert_frame_equal(database.read_db(out)["e2e"], merged["e2e"])  # idempotent

    for bad, why in ((tmp_path / "notes", "holds other files and no opcost table"),
                     (tmp_path / "notes" / "a.txt", "is a file, not a database directory")):
        (tmp_path / "notes").mkdir(exist_ok=True)
        (tmp_path / "notes" / "a.txt").write_text("mine")
        p = subprocess.run([sys.executable, "-m", "opcost.cli", "db", "merge", str(db), "--out", str(bad)],
                           capture_output=True, text=True, check=False)
        assert p.returncode == 1 and p.stdout == "" and "Traceback" not in p.stderr
        assert p.stderr.strip() == (f"opcost: --out {bad}: {why}: name a new or empty directory, or an existing "
                                    "database to merge into")
        assert [f.name for f in (tmp_path / "notes").iterdir()] == ["a.txt"]
        assert (tmp_path / "notes" / "a.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    assert len(database.merge([db], tmp_path / "empty")["measurements"]) == len(before["measurements"])


def test_predict_on_two_runs_of_one_host_takes_costs_and_reference_from_one_run(tiny_run, tmp_path):
    """A merged database of two runs of one host predicts as the newer run alone does (costs, reference and traced
    overhead of that run, not the older run's end-to-end times pooled in), the older run with --run, and says so
    where the run lacks some costs and takes them from the other."""
    from opcost.analysis import estimate

    db = tiny_run / "results" / "db"
    second = _second_run(db, tmp_path / "second")
    database.merge([db, second], tmp_path / "merged")
    merged = database.read_db(tmp_path / "merged")
    own = {d: database.read_db(d) for d in (db, second)}
    for model, mode in (("mlp", "inference"), ("tiny_dlrm", "training")):
        layers = estimate.workload_layers(merged, model, 2, mode)
        newer = estimate.predict_workload(merged, layers)
        alone = estimate.predict_workload(own[second], layers)
        assert newer.run == database.run_id(own[second]) and newer.other_runs_share == 0 and newer.runs_held == 2
        assert (newer.predicted_s, newer.measured_s) == pytest.approx((alone.predicted_s, alone.measured_s))
        older = estimate.predict_workload(merged, layers, run=database.run_id(own[db]))
        first = estimate.predict_workload(own[db], layers)
        assert (older.predicted_s, older.measured_s) == pytest.approx((first.predicted_s, first.measured_s))
        assert newer.measured_s == pytest.approx(2 * older.measured_s)  # not the pooled 1.5x
    with pytest.raises(OpcostError, match=r"^--run 1999: the database holds no such run on these conditions \(runs: "):
        estimate.predict_workload(merged, layers, run="1999")

    partial = _second_run(db, tmp_path / "partial", drop_op_type="relu")  # a newer run that lacks relu's costs
    database.merge([db, partial], tmp_path / "mixed")
    mixed = estimate.predict_workload(database.read_db(tmp_path / "mixed"),
                                      estimate.workload_layers(merged, "mlp", 2, "inference"))
    relu = mixed.layers[mixed.layers["op_type"] == "relu"]
    assert set(relu["run"]) == {database.run_id(own[db])}
    assert mixed.other_runs_share == pytest.approx(relu["total_s"].sum() / sum(mixed.runs_s.values()))
    assert 0 < mixed.other_runs_share < 1
    out = subprocess.run([sys.executable, "-m", "opcost.cli", "predict", "mlp", "--batch", "2", "--db",
                          str(tmp_path / "mixed")], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[1] == (f"  mixes runs: end-to-end reference of run {mixed.run}, {mixed.other_runs_share:.0%} of the "
                      f"measured operator time from other runs ({database.run_id(own[db])} "
                      f"{mixed.other_runs_share:.0%}), which it lacks")
    one = subprocess.run([sys.executable, "-m", "opcost.cli", "predict", "mlp", "--batch", "2", "--db", str(db)],
                         capture_output=True, text=True, check=True).stdout
    assert "run" not in one.splitlines()[1]  # a run's own database: no line about runs


def test_references_never_pool_the_runs_of_a_merged_database():
    from opcost.analysis.predict import references

    def e2e(seconds, ts, run, method="rotation"):
        return {**dict.fromkeys(tables.E2E.names), "model": "m", "batch": 1, "mode": "inference",
                "method": method, "device": "cpu", "placement": "default", "median_s": seconds,
                "trimmed_mean_s": seconds, "n": 10, "timed_s": 1.0, "timestamp": ts, "run": run}

    rows = tables.frame(tables.E2E, [e2e(8.0, "2026-01-01T00:01:00", "a"), e2e(10.0, "2026-01-01T00:02:00", "a"),
                                     e2e(20.0, "2026-01-02T00:01:00", "b"),
                                     e2e(40.0, "2026-01-03T00:01:00", "c", method="tier")])  # no reference
    assert references(rows, "cpu", "isolated") == {("m", 1, "inference"): (20.0, "rotation")}  # the newest run
    assert references(rows, "cpu", "isolated", run="a") == {("m", 1, "inference"): (9.0, "rotation")}
    unnamed = rows[rows["method"] == "rotation"].assign(run=pd.NA)  # a run's own database: one run
    assert references(unnamed, "cpu", "isolated")[("m", 1, "inference")][0] == pytest.approx(38 / 3)


def test_a_merge_of_one_model_name_in_two_variants_is_refused_before_anything_is_written(tiny_run, tmp_path):
    """Two runs whose same-named model was built in another dtype: merged, every prediction of that name used to be
    refused; the merge refuses the pair in one line naming the model and both inputs, and writes nothing."""
    db = tiny_run / "results" / "db"
    other = tmp_path / "other"
    held = database.read_db(db)
    model = held["layers"]["model"].iloc[0]
    for name, table in database.DB_TABLES.items():
        df = held[name]
        if name == "layers":
            mine = df["model"] == model
            df = df.assign(inputs=df["inputs"].where(~mine, df["inputs"].str.replace('"float32"', '"bfloat16"')))
        io.write_parquet(df, other / f"{name}.parquet", table)
    with pytest.raises(OpcostError) as err:
        database.merge([db, other], tmp_path / "merged")
    assert f"model {model}" in str(err.value) and str(other) in str(err.value) and "bfloat16" in str(err.value)
    assert not (tmp_path / "merged").exists()
    p = subprocess.run([sys.executable, "-m", "opcost.cli", "db", "merge", str(db), str(other), "--out",
                        str(tmp_path / "cli")], capture_output=True, text=True, check=False)
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1 and f"model {model}" in p.stderr, p.stderr
    assert database.merge([db, db], tmp_path / "same")  # the same variant twice merges


def test_a_merge_names_each_table_an_input_lacks(tiny_run, tmp_path):
    """An input without e2e.parquet merged silently, and predictions from the merge then read an empty table."""
    import shutil

    other = tmp_path / "other"
    shutil.copytree(tiny_run / "results" / "db", other)
    (other / "e2e.parquet").unlink()
    p = subprocess.run([sys.executable, "-m", "opcost.cli", "db", "merge", str(other), "--out", str(tmp_path / "m")],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 0 and f"opcost: warning: database {other}: no e2e.parquet (" in p.stderr, p.stderr


def test_a_merge_into_a_runs_own_database_is_refused(tiny_run, tmp_path):
    """Merged into a run's results/db, another host's rows were validated by the run's next pass as its own (the
    summary mixed two hosts, reference spread 107%); refused, nothing written."""
    import shutil

    run = tmp_path / "run" / "results"
    shutil.copytree(tiny_run / "results" / "db", run / "db")
    (run / "journal").mkdir()
    before = {p.name: p.read_bytes() for p in (run / "db").iterdir()}
    with pytest.raises(OpcostError, match=r"is a workflow run's own database"):
        database.merge([tiny_run / "results" / "db"], run / "db")
    assert {p.name: p.read_bytes() for p in (run / "db").iterdir()} == before


def test_the_methods_error_is_not_counted_twice_where_predict_only_models_set_the_estimated_parts_range(
        tiny_run, monkeypatch):
    """The errors of `predict_only` models are whole predictions against their end-to-end times: they hold the
    method's own error of the part they estimated, which then widens only the measured part; the cost model's
    held-out operator sums do not, and the method's error spans the whole centre beside them."""
    from opcost.analysis import estimate, interval
    from opcost.analysis.calibration import ModelSpread
    from opcost.analysis.interval import Overhead, workload_interval
    from opcost.analysis.predict import DEFAULT_STATISTIC

    db = database.read_db(tiny_run / "results" / "db")
    used, _ = estimate.conditions(db["measurements"])
    monkeypatch.setattr(interval, "method_error", lambda *a, **k: (-0.1, 0.1))
    monkeypatch.setattr(interval, "timing_spread", lambda *a, **k: None)
    rows = pd.DataFrame({"op_type": ["Linear", "add"], "phase": "forward", "count": [1, 1],
                         "cost_s": [8e-3, 1e-3], "low_s": [4e-3, 1e-3], "high_s": [16e-3, 1e-3],
                         "method": ["law", "measured"]})
    rows["total_s"] = rows["count"] * rows["cost_s"]
    centre, h = 10e-3, 0.3
    over = Overhead(1e-3, "trace now", (1e-6, 0.0, 3e-6))
    whole = workload_interval(db, used, rows, over, DEFAULT_STATISTIC, "inference", "unseen",
                              ModelSpread(h, 9, "nine models", whole=True))
    assert whole.high == pytest.approx(centre + np.hypot(8e-3 * np.expm1(h), 2e-3 * 0.1))
    assert whole.low == pytest.approx(centre - np.hypot(8e-3 * (1 - np.exp(-h)), 2e-3 * 0.1))
    summed = workload_interval(db, used, rows, over, DEFAULT_STATISTIC, "inference", "unseen",
                               ModelSpread(h, 9, "nine held-out models"))
    assert summed.high == pytest.approx(centre + np.hypot(8e-3 * np.expm1(h), centre * 0.1))
    assert summed.high - summed.low > whole.high - whole.low


def test_db_runs_lists_each_run_and_host_a_merged_database_holds(tiny_run, tmp_path):
    """`opcost db runs`: one row per run and measuring conditions, with its host, processor, threads, torch, time
    span and how much it measured; a merged database of two runs lists both under their names."""
    src = tiny_run / "results" / "db"
    db = database.read_db(src)
    one = database.runs_table(db)
    assert len(one) == 1 and one["run"].iloc[0] == database.run_id(db)
    assert one["configurations"].iloc[0] == db["measurements"]["config_id"].nunique()
    assert one["workloads"].iloc[0] == len(db["e2e"][["model", "mode", "batch"]].drop_duplicates())
    assert one["host"].iloc[0] == db["measurements"]["host"].iloc[0]
    # another host's run of one configuration, a minute later
    other = tmp_path / "other"
    other.mkdir()
    for name, t in database.DB_TABLES.items():
        rows = db[name].iloc[:1] if name == "measurements" else db[name].iloc[:0]
        if name == "measurements":
            rows = rows.assign(host="node07", timestamp="2099-01-01T00:00:00+00:00")
        io.write_parquet(tables.frame(t, rows), other / f"{name}.parquet", t)
    merged = tmp_path / "merged"
    database.merge([src, other], merged)
    out = subprocess.run([sys.executable, "-m", "opcost.cli", "db", "runs", "--db", str(merged)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == 3 and out[0].split()[:3] == ["run", "host", "processor"]
    assert "node07" in out[2] and "2099-01-01T00:00:00+00:00" in out[2] and out[1].split()[0] == one["run"].iloc[0]
