"""Kineto traces: recording a real model, the table model, T1-T5 overheads, GEMM/conv dimensions, prediction."""
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from opcost import io, trace_tables
from opcost.analysis import overhead, trace_parse, tracing
from opcost.analysis import trace_analysis as ta
from opcost.errors import OpcostError
from opcost.measure import trace as rec
from opcost.model.sources import LoadedModel
from opcost.model.workload import make_workload
from opcost.report import figures

ITERATIONS = 3


def _workload(mode: str):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    model = LoadedModel("mlp", module, lambda batch, seed=0: (torch.randn(batch, 16),))
    return make_workload(model, 4, mode)


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    torch.set_num_threads(1)
    path = rec.record(_workload("inference"), tmp_path_factory.mktemp("t") / "mlp.json.gz",
                        iterations=ITERATIONS, warmup=1)
    return path, trace_parse.parse(path)


# ---------------------------------------------------------------------------------------------- real CPU trace


def test_recorded_trace_is_gzipped_chrome_json_with_marked_iterations(cpu_trace):
    path, tt = cpu_trace
    with gzip.open(path, "rt") as f:
        raw = json.load(f)["traceEvents"]
    markers = [e for e in raw if e.get("name") == rec.MARKER]
    assert len(markers) == ITERATIONS == tt.n_iterations
    spans = ta.iterations(tt)["span_s"].to_numpy()
    assert spans == pytest.approx([m["dur"] * 1e-6 for m in sorted(markers, key=lambda m: m["ts"])], rel=1e-9)
    assert not list(path.parent.glob(".*tmp*")), "temporary export left behind"


def test_op_tree_of_a_real_trace(cpu_trace):
    _, tt = cpu_trace
    ev = tt.events.set_index("id")
    calls = ta.op_calls(tt)
    per_iteration = calls.groupby("iteration")["op_type"].apply(list)
    assert per_iteration.tolist() == [["aten::linear", "aten::relu", "aten::linear"]] * ITERATIONS
    for op_id in calls.loc[calls["op_type"] == "aten::linear", "id"]:
        children = ev[ev["parent"] == op_id]
        assert "aten::addmm" in children["name"].tolist()
        addmm = children[children["name"] == "aten::addmm"]
        assert addmm["depth"].tolist() == [1] and addmm["top_op"].tolist() == [op_id]
        assert ev.at[op_id, "depth"] == 0 and ev.at[op_id, "top_op"] == op_id
    marker_ids = tt.markers["id"].tolist()
    assert set(ev.loc[calls["id"], "parent"]) <= set(marker_ids)  # top-level ops are the markers' children
    assert tt.kernels.empty and not tt.events["launch"].any()


def test_op_time_plus_gaps_add_up_to_the_iteration(cpu_trace):
    _, tt = cpu_trace
    calls = ta.op_calls(tt)
    its = ta.iterations(tt, calls).set_index("iteration")
    samples = ta.overhead_samples(tt, calls)
    op_time = calls.groupby("iteration")["cpu_s"].sum()
    gaps = samples.groupby("iteration")["seconds"].sum()  # T1 before each op + the <end> gap
    assert (op_time + gaps).to_numpy() == pytest.approx(its["span_s"].to_numpy(), abs=1e-8)  # ns: float64 timestamps
    assert its["cpu_busy_s"].to_numpy() == pytest.approx(op_time.to_numpy(), abs=1e-8)
    assert (its["cpu_idle_s"] > 0).all() and its["device_idle_s"].isna().all()
    types = ta.op_types(tt, calls).set_index("op_type")
    assert types.loc["aten::linear", "calls"] == 2 and types.loc["aten::relu", "calls"] == 1
    assert types["device_s"].isna().all()


def test_cpu_overheads_have_t1_only(cpu_trace):
    _, tt = cpu_trace
    samples = ta.overhead_samples(tt)
    assert set(samples["kind"]) == {"T1"}
    stats = ta.overheads(samples).set_index(["op_type", "kind"])
    assert stats.loc[("aten::linear", "T1"), "n"] + stats.loc[("aten::linear", "T1"), "outliers"] == 2 * ITERATIONS
    assert stats.loc[(ta.END, "T1"), "n"] + stats.loc[(ta.END, "T1"), "outliers"] == ITERATIONS
    assert stats.loc[(ta.ALL_TYPES, "T1"), "n"] + stats.loc[(ta.ALL_TYPES, "T1"), "outliers"] == 3 * ITERATIONS
    assert (stats["mean_s"] > 0).all()


def test_gemm_dimensions_of_linear_and_addmm(cpu_trace):
    _, tt = cpu_trace
    top = ta.op_dims(tt)
    assert top["name"].tolist() == ["aten::linear"] * 2 * ITERATIONS
    first, second = top.iloc[0], top.iloc[1]
    assert (first["M"], first["N"], first["K"], first["batch"]) == (4, 32, 16, 1)  # Linear(16, 32) on batch 4
    assert (second["M"], second["N"], second["K"]) == (4, 8, 32)
    inner = ta.op_dims(tt, top_only=False)
    addmm = inner[inner["name"] == "aten::addmm"].iloc[0]
    assert (addmm["M"], addmm["N"], addmm["K"]) == (4, 32, 16)


def test_training_trace_has_backward_top_level_ops(tmp_path):
    tt = trace_parse.parse(rec.record(_workload("training"), tmp_path / "train.json", iterations=2, warmup=1))
    calls = ta.op_calls(tt)
    assert tt.n_iterations == 2
    for _, c in calls.groupby("iteration"):
        assert (c["op_type"] == "autograd::engine::evaluate_function: AddmmBackward0").sum() == 2
    gaps = ta.overhead_samples(tt, calls).groupby("iteration")["seconds"].sum()
    spans = ta.iterations(tt, calls)["span_s"].to_numpy()
    assert (calls.groupby("iteration")["cpu_s"].sum() + gaps).to_numpy() == pytest.approx(spans, abs=1e-8)


# ---------------------------------------------------------------------------------------------- synthetic GPU trace


def _x(name, cat, ts, dur, pid=100, tid=100, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _iteration(t0: float, corr0: int, flow_only: bool = False) -> list:
    """One iteration of [t0, t0 + 100) us: linear (2 launches), relu (1 launch), view (none), a synchronize."""
    c1, c2, c3 = corr0, corr0 + 1, corr0 + 2
    ev = [
        _x(rec.MARKER, "user_annotation", t0, 100),
        _x("linear_forward", "python_function", t0 + 8, 44),  # unknown to the model: ignored
        _x("aten::linear", "cpu_op", t0 + 10, 40, **{"Input Dims": [[4, 16], [32, 16], [32]]}),
        _x("aten::addmm", "cpu_op", t0 + 12, 36, **{"Input Dims": [[32], [4, 16], [16, 32], [], []]}),
        _x("cudaLaunchKernel", "cuda_runtime", t0 + 15, 5, cbid=211, correlation=c1),
        _x("cudaLaunchKernel", "cuda_runtime", t0 + 24, 6, cbid=211, correlation=c2),
        _x("aten::relu", "cpu_op", t0 + 60, 20, **{"Input Dims": [[4, 32]]}),
        _x("aten::clamp_min", "cpu_op", t0 + 62, 16, **{"Input Dims": [[4, 32], []]}),
        _x("cudaLaunchKernel", "cuda_runtime", t0 + 70, 4, cbid=211, correlation=c3),
        _x("aten::view", "cpu_op", t0 + 85, 3, **{"Input Dims": [[4, 32], []]}),
        _x("cudaDeviceSynchronize", "cuda_runtime", t0 + 90, 8, cbid=165, correlation=corr0 + 50),
        _x("ampere_sgemm_32x32", "kernel", t0 + 20, 20, pid=0, tid=7, device=0, stream=7, correlation=c1),
        _x("bias_add_kernel", "kernel", t0 + 40, 5, pid=0, tid=7, device=0, stream=7, correlation=c2),
        _x("clamp_min_kernel", "kernel", t0 + 75, 10, pid=0, tid=7, device=0, stream=7, correlation=c3),
        _x(rec.MARKER, "gpu_user_annotation", t0 + 20, 65, pid=0, tid=7),
    ]
    for c, ts_launch, ts_kernel in ((c1, t0 + 15, t0 + 20), (c2, t0 + 24, t0 + 40), (c3, t0 + 70, t0 + 75)):
        ev.append({"ph": "s", "id": c, "pid": 100, "tid": 100, "ts": ts_launch, "cat": "ac2g", "name": "ac2g"})
        ev.append({"ph": "f", "id": c, "pid": 0, "tid": 7, "ts": ts_kernel, "cat": "ac2g", "name": "ac2g",
                   "bp": "e"})
    if flow_only:  # the relu kernel loses its correlation: the flow arrow must link it
        del ev[13]["args"]["correlation"]
    return ev


def _gpu_doc() -> dict:
    meta = [{"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
            {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 5000},
            {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
             "ts": 900, "dur": 600}]
    return {"schemaVersion": 1, "traceEvents": meta + _iteration(1000.0, 1) + _iteration(1200.0, 101, True)}


@pytest.fixture
def gpu_trace(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(_gpu_doc()))
    return trace_parse.parse(path)


def test_kernels_link_to_their_launch_and_top_level_op(gpu_trace):
    tt = gpu_trace
    ev, kn = tt.events.set_index("id"), tt.kernels
    assert tt.n_iterations == 2 and len(kn) == 6 and tt.has_device
    assert "linear_forward" not in set(tt.events["name"])  # python_function ignored
    for _, k in kn.iterrows():
        launch = ev.loc[k["launch_id"]]
        assert launch["name"] == "cudaLaunchKernel" and launch["launch"]
        assert launch["ts_us"] < k["ts_us"]
        expected_op = "aten::linear" if k["name"] != "clamp_min_kernel" else "aten::relu"
        assert ev.at[k["top_op"], "name"] == expected_op
        assert k["iteration"] == ev.at[k["top_op"], "iteration"]
        assert (k["device"], k["stream"]) == (0, 7)
    flow_linked = kn[kn["correlation"].isna()]
    assert len(flow_linked) == 1 and ev.at[flow_linked["launch_id"].iloc[0], "correlation"] == 103
    sync = tt.events[tt.events["name"] == "cudaDeviceSynchronize"]
    assert not sync["launch"].any() and sync["top_op"].isna().all() and (sync["depth"] == 0).all()
    addmm = tt.events[tt.events["name"] == "aten::addmm"]
    assert (addmm["depth"] == 1).all() and (ev.loc[addmm["parent"], "name"] == "aten::linear").all()


def test_synthetic_overheads_are_exact(gpu_trace):
    s = ta.overhead_samples(gpu_trace)
    us = {(t, k): sorted(round(x * 1e6, 9) for x in g["seconds"]) for (t, k), g in s.groupby(["op_type", "kind"])}
    assert us == {
        ("aten::linear", "T1"): [10, 10], ("aten::relu", "T1"): [10, 10], ("aten::view", "T1"): [5, 5],
        (ta.END, "T1"): [12, 12],  # iteration end - max(view end 88, last kernel end 85)
        ("aten::linear", "T2"): [5, 5], ("aten::linear", "T3"): [20, 20], ("aten::linear", "T4"): [5, 5, 6, 6],
        ("aten::linear", "T5"): [4, 4],
        ("aten::relu", "T2"): [10, 10], ("aten::relu", "T3"): [6, 6], ("aten::relu", "T4"): [4, 4],
    }
    stats = ta.overheads(s).set_index(["op_type", "kind"])
    assert stats.loc[("aten::linear", "T4"), "mean_s"] == pytest.approx(5.5e-6)
    assert stats.loc[(ta.ALL_TYPES, "T4"), "n"] == 6


def test_outliers_are_what_differs_from_the_same_call_in_other_iterations():
    import pandas as pd

    from opcost.measure.timing import within_sigma

    rng = np.random.default_rng(0)
    rows = []
    for it in range(10):  # two linear calls per iteration: glue 1 us before the first, 5 us before the second
        for pos, (op_type, base) in enumerate((("aten::linear", 1e-6), ("aten::relu", 2e-6), ("aten::linear", 5e-6))):
            rows.append({"iteration": it, "op_id": 100 * it + pos, "op_type": op_type, "kind": "T1",
                         "seconds": base * (1 + 0.05 * rng.standard_normal())})
        rows.append({"iteration": it, "op_id": pd.NA, "op_type": ta.END, "kind": "T1",
                     "seconds": 168e-6 if it == 3 else 9e-6 * (1 + 0.05 * rng.standard_normal())})
    s = pd.DataFrame(rows).astype({"op_id": "Int64"})
    mask = ta.outliers(s)
    assert mask.sum() == 1 and s[mask]["seconds"].tolist() == [168e-6]  # the interrupted iteration's tail only
    tail = s[s["op_type"] == ta.END]["seconds"].to_numpy()
    assert len(within_sigma(tail)) == 10  # 3 sigma of 10 samples cannot drop it
    stats = ta.overheads(s).set_index(["op_type", "kind"])
    assert stats.loc[(ta.END, "T1"), "mean_s"] == pytest.approx(9e-6, rel=0.05)
    assert stats.loc[(ta.END, "T1"), "outliers"] == 1
    lin = stats.loc[("aten::linear", "T1")]  # the 5 us gaps are the second call's glue, not outliers
    assert lin["n"] == 20 and lin["outliers"] == 0 and lin["mean_s"] == pytest.approx(3e-6, rel=0.05)
    assert not ta.outliers(s[s["iteration"] < 4]).any()  # 4 iterations: too few to call one an outlier


def test_synthetic_device_time_idle_and_op_kernels(gpu_trace):
    calls = ta.op_calls(gpu_trace).set_index("id")
    dev = calls.groupby("op_type")["device_s"].first() * 1e6
    assert dev.round(9).to_dict() == {"aten::linear": 25, "aten::relu": 10, "aten::view": 0}
    assert calls.groupby("op_type")["launches"].first().to_dict() == {"aten::linear": 2, "aten::relu": 1,
                                                                      "aten::view": 0}
    its = ta.iterations(gpu_trace)
    assert (its[["span_s", "cpu_busy_s", "cpu_idle_s", "device_busy_s", "device_idle_s"]] * 1e6).round(6).to_numpy(
    ).tolist() == [[100, 63, 37, 35, 65]] * 2
    ok = ta.op_kernels(gpu_trace).set_index("kernel")
    assert ok.at["ampere_sgemm_32x32", "op_type"] == "aten::linear"
    assert json.loads(ok.at["ampere_sgemm_32x32", "shapes"]) == [[4, 16], [32, 16], [32]]
    assert ok.at["ampere_sgemm_32x32", "count"] == 1 and ok.at["ampere_sgemm_32x32", "mean_s"] == pytest.approx(2e-5)
    assert ok["total_s"].sum() == pytest.approx(35e-6)


def test_gpu_prediction_takes_the_longer_of_host_and_device_per_op(gpu_trace):
    r = overhead.trace_prediction(gpu_trace)
    # per iteration: linear max(40 host, 25 device) + relu max(20, 10) + view 3 + T1 10+10+5 + <end> 12 = 100 us
    assert r["measured_s"] == pytest.approx(100e-6) and r["predicted_s"] == pytest.approx(100e-6)
    assert r["plain_s"] == pytest.approx(35e-6)
    # walked on two timelines (the relu kernel queued at 70 after the linear's ended at 40): the CPU is busy
    # the whole 100 us, so the CPU's issuing bounds the iteration
    assert r["bound"] == "launch"
    walks = overhead.trace_walk(gpu_trace)
    assert [w.iteration_s for w in walks] == pytest.approx([100e-6, 100e-6])
    assert walks[0].device_busy_s == pytest.approx(35e-6)
    model = overhead.OverheadModel.from_trace(gpu_trace)
    assert model.gpu and model.host["aten::linear"] == pytest.approx(40e-6)  # 5 + 2 x 5.5 + 4 + 20
    p = overhead.predict({"aten::linear": 1, "aten::relu": 1, "aten::view": 1},
                      {"aten::linear": 50e-6, "aten::relu": 1e-6}, model)
    assert p["predicted_s"] == pytest.approx((50 + 20 + 3 + 25 + 12) * 1e-6)
    assert p["ops_s"] == pytest.approx(51e-6) and p["uncovered_calls"] == 1


def test_cpu_prediction_adds_per_type_gaps_and_the_end_gap():
    model = overhead.OverheadModel(t1={"a": 1.0}, t1_default=2.0, tail=0.5)
    p = overhead.predict({"a": 2, "b": 3}, {"a": 10.0, "b": 1.0}, model)
    assert p["predicted_s"] == 2 * (10 + 1) + 3 * (1 + 2) + 0.5 and p["ops_s"] == 23
    assert model.gap_s({"a": 2, "b": 3}) == 2 * 1 + 3 * 2 + 0.5


def test_cpu_only_trace_without_kernels_parses(tmp_path):
    doc = _gpu_doc()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in
                          ("kernel", "cuda_runtime", "ac2g", "gpu_user_annotation")]
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(doc))
    tt = trace_parse.parse(path)
    assert tt.kernels.empty and not tt.has_device and tt.n_iterations == 2
    s = ta.overhead_samples(tt)
    assert set(s["kind"]) == {"T1"}
    assert ta.op_calls(tt)["device_s"].isna().all() and ta.op_kernels(tt).empty
    assert ta.iterations(tt)["device_busy_s"].isna().all()
    r = overhead.trace_prediction(tt)
    assert r["predicted_s"] == pytest.approx(100e-6)  # 63 us of ops + 25 us T1 + 12 us <end>


def test_profiler_step_markers_when_there_is_no_opcost_marker(tmp_path):
    doc = _gpu_doc()
    for k, e in enumerate(e for e in doc["traceEvents"] if e.get("name") == rec.MARKER
                          and e.get("cat") == "user_annotation"):
        e["name"] = f"ProfilerStep#{k + 5}"
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(doc))
    assert trace_parse.parse(path).n_iterations == 2


@pytest.mark.parametrize("name,text", [("cut.json", '{"traceEvents": [{"ph": "X", "na'),
                                       ("bad.json.gz", None), ("other.json", '{"hello": 1}')])
def test_unreadable_trace_is_an_error_naming_the_file(tmp_path, name, text):
    path = tmp_path / name
    if text is None:  # a truncated gzip stream
        path.write_bytes(gzip.compress(json.dumps(_gpu_doc()).encode())[:200])
    else:
        path.write_text(text)
    with pytest.raises(OpcostError) as err:
        trace_parse.parse(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_parquet_cache_roundtrip(tmp_path, monkeypatch):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(_gpu_doc()))
    fresh = trace_parse.parse(path, cache=True)
    assert (tmp_path / "gpu.json.events.parquet").exists() and (tmp_path / "gpu.json.kernels.parquet").exists()

    def no_parse(p):
        raise AssertionError("cache not used")

    monkeypatch.setattr(trace_parse, "_parse", no_parse)
    cached = trace_parse.parse(path, cache=True)
    pd.testing.assert_frame_equal(cached.events, fresh.events)
    pd.testing.assert_frame_equal(cached.kernels, fresh.kernels)
    monkeypatch.undo()
    doc = _gpu_doc()
    doc["traceEvents"] = doc["traceEvents"][:-20]  # a newer trace invalidates the cache
    path.write_text(json.dumps(doc))
    import os

    os.utime(path, (path.stat().st_atime, path.stat().st_mtime + 10))
    assert len(trace_parse.parse(path, cache=True).events) < len(fresh.events)


# ---------------------------------------------------------------------------------------------- dims, tables, figures


@pytest.mark.parametrize("name,shapes,expected", [
    ("aten::mm", [[4, 8], [8, 16]], {"M": 4, "N": 16, "K": 8, "batch": 1}),
    ("aten::bmm", [[3, 4, 8], [3, 8, 16]], {"M": 4, "N": 16, "K": 8, "batch": 3}),
    ("aten::matmul", [[2, 5, 4, 8], [8, 16]], {"M": 4, "N": 16, "K": 8, "batch": 10}),
    ("aten::matmul", [[8], [8, 16]], {"M": 1, "N": 16, "K": 8, "batch": 1}),
    ("aten::linear", [[2, 3, 16], [32, 16], [32]], {"M": 6, "N": 32, "K": 16, "batch": 1}),
    ("aten::conv2d", [[1, 3, 224, 224], [64, 3, 7, 7], [64], [], [], [], []],
     {"N": 1, "C": 3, "H": 224, "W": 224, "K": 64, "R": 7, "S": 7}),
])
def test_dims(name, shapes, expected):
    d = ta.dims(name, json.dumps(shapes))
    assert d.pop("kind") == ("conv" if "conv" in name else "gemm") and d == expected


def test_dims_of_other_ops_are_missing():
    assert ta.dims("aten::conv2d", [[3, 224, 224], [64, 3, 7, 7]]) is None  # 3-D input: not a 2-D conv batch
    assert ta.dims("aten::relu", [[4, 32]]) is None


def test_summaries_fit_their_tables_and_draw(gpu_trace, cpu_trace, tmp_path):
    tt = trace_tables
    assert set(tt.ALL) >= {tt.TRACE_EVENTS, tt.TRACE_OVERHEADS, tt.TRACE_OP_TYPES}
    gpu = overhead.summarize(gpu_trace, "synthetic", "inference", 4, "cuda:0")
    cpu = overhead.summarize(cpu_trace[1], "mlp", "inference", 4)
    assert set(cpu["trace_op_types"]["device"]) == {"cpu"}
    for t in (tt.TRACE_OP_TYPES, tt.TRACE_ITERATIONS, tt.TRACE_OP_KERNELS, tt.TRACE_OVERHEADS,
              tt.TRACE_OVERHEAD_SAMPLES):
        io.write_parquet(pd.concat([gpu[t.name], cpu[t.name]]), tmp_path / f"{t.name}.parquet", t)
        assert len(io.read_parquet(tmp_path / f"{t.name}.parquet", t)) == len(gpu[t.name]) + len(cpu[t.name])
    model = overhead.OverheadModel.from_tables(gpu["trace_overheads"], gpu["trace_op_types"])
    assert model == overhead.OverheadModel.from_trace(gpu_trace)
    both = {k: pd.concat([gpu[k], cpu[k]], ignore_index=True) for k in gpu}
    figures.trace_breakdown(both["trace_op_types"], both["trace_iterations"], tmp_path / "dominant.png")
    figures.trace_overheads(both["trace_overhead_samples"], tmp_path / "overheads.png")
    figures.trace_overheads(both["trace_overhead_samples"].iloc[:0], tmp_path / "empty.png")
    for name in ("dominant.png", "overheads.png", "empty.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_profiler_dilation_is_measured_and_subtracted_from_gaps(tmp_path):
    d = tracing.profiler_dilation(tmp_path / "cal.json.gz", calls=1000, repeats=5)
    assert 0 < d < 1e-3  # the profiler costs something per call, far less than a millisecond
    stats = pd.DataFrame({"op_type": ["aten::add", ta.ALL_TYPES, ta.END, overhead.PROFILER],
                          "kind": "T1", "mean_s": [5e-6, 5e-6, 9e-6, 2e-6]})
    types = pd.DataFrame({"op_type": ["aten::add"], "calls": [10.0], "cpu_s": [1e-4], "device_s": [None],
                          "launches": [0.0]})
    model = overhead.OverheadModel.from_tables(stats, types)
    assert model.t1["aten::add"] == pytest.approx(3e-6) and model.tail == pytest.approx(7e-6)
    assert model.gap_s({"aten::add": 10}) == pytest.approx(10 * 3e-6 + 7e-6)


def test_replay_trace_holds_the_model_ops_and_gives_the_gaps_isolated_costs_include(tmp_path):
    from opcost.config import validate
    from opcost.model.sources import load_model

    models = validate({"models": {"mlp": {"model": "tests.tiny_models:make_mlp", "input_shapes": [[8]]}}})["models"]
    wl = make_workload(load_model("mlp", models["mlp"]), 4, "inference")
    path = rec.record(wl, tmp_path / "model.json.gz", iterations=4, warmup=1,
                        paired=rec.replay_runner(wl, models)[0])
    model_tt = trace_parse.parse(path)
    replay_tt = model_tt.with_marker(rec.REPLAY_MARKER)

    def ops(tt, it=0):
        calls = ta.op_calls(tt)
        return calls[calls["iteration"] == it]["op_type"].tolist()

    # one profiler session: each step runs the model twice (the analysed iteration follows an iteration, not the
    # replay), then the replay; each read through its own marker; every event belongs to at most one of them
    assert model_tt.n_iterations == replay_tt.n_iterations == 4
    m, r = model_tt.markers["ts_us"].to_numpy(), replay_tt.markers["ts_us"].to_numpy()
    warm = model_tt.with_marker(rec.WARM_MARKER).markers["ts_us"].to_numpy()
    assert len(warm) == 4 and (warm < m).all() and (m < r).all() and (r[:-1] < warm[1:]).all()
    assert not (model_tt.events["iteration"].notna() & replay_tt.events["iteration"].notna()).any()
    # the replay issues the model's top-level ops (leaf modules, functional relu and +=, flatten) in its order
    assert all(ops(replay_tt, k) == ops(model_tt, k) for k in range(4)) and "aten::add_" in ops(model_tt)
    stats = overhead.summarize(model_tt, "mlp", "inference", 4, "cpu", replay=replay_tt)["trace_overheads"]
    t1 = stats[stats["kind"] == "T1"]
    t1r = stats[stats["kind"] == overhead.REPLAY_KIND]
    assert set(t1r["op_type"]) == set(t1["op_type"]) and (t1r["mean_s"] > 0).all()
    # training: the forward calls replayed with autograd recording, as isolated forward rows are timed
    train = make_workload(load_model("mlp", models["mlp"]), 4, "training")
    run, left_out = rec.replay_runner(train, models)
    assert not left_out
    train_tt = trace_parse.parse(rec.record(train, tmp_path / "train.json.gz", iterations=2, warmup=1, paired=run))
    forward = ops(train_tt.with_marker(rec.REPLAY_MARKER))
    main = ("aten::linear", "aten::relu", "aten::add_", "aten::mean")  # an in-place call's replay adds its clone
    assert [o for o in forward if o in main] == [o for o in ops(train_tt) if o in main]  # the model also backward
    assert "autograd::engine::evaluate_function: AddmmBackward0" in ops(train_tt)


def test_replay_gaps_are_subtracted_instead_of_the_profiler_cost():
    stats = pd.DataFrame({"op_type": ["aten::add", ta.ALL_TYPES, ta.END, overhead.PROFILER,
                                      "aten::add", ta.ALL_TYPES, ta.END],
                          "kind": ["T1"] * 4 + [overhead.REPLAY_KIND] * 3,
                          "mean_s": [5e-6, 5e-6, 9e-6, 2e-6, 3.5e-6, 3e-6, 1e-6]})
    types = pd.DataFrame({"op_type": ["aten::add"], "calls": [10.0], "cpu_s": [1e-4], "device_s": [None],
                          "launches": [0.0]})
    model = overhead.OverheadModel.from_tables(stats, types)
    assert model.t1["aten::add"] == pytest.approx(1.5e-6) and model.t1_default == pytest.approx(2e-6)
    assert model.tail == pytest.approx(8e-6)
    assert model.gap_s({"aten::add": 10, "aten::mul": 1}) == pytest.approx(10 * 1.5e-6 + 2e-6 + 8e-6)
    # a replay slower between calls than the model (noise on a tiny workload): the iteration's glue counts 0
    slow = stats.assign(mean_s=[2e-6, 2e-6, 1e-6, 2e-6, 6e-6, 6e-6, 3e-6])
    noisy = overhead.OverheadModel.from_tables(slow, types)
    assert noisy.t1["aten::add"] == pytest.approx(-4e-6) and noisy.gap_s({"aten::add": 10}) == 0.0
    p = overhead.predict({"aten::add": 10}, {"aten::add": 1e-5}, noisy)
    assert p["predicted_s"] == pytest.approx(1e-4) and p["overhead_s"] == pytest.approx(0.0)


def _glue_stats(glue_s: float, std_s: float, rounds: int = 7) -> pd.DataFrame:
    """T1 and T1r rows whose traced glue is 10 x 1.5 µs + 8 µs = 23 µs per iteration, and a G row."""
    return pd.DataFrame({"op_type": ["aten::add", ta.ALL_TYPES, ta.END, "aten::add", ta.ALL_TYPES, ta.END,
                                     ta.ALL_TYPES],
                         "kind": ["T1"] * 3 + [overhead.REPLAY_KIND] * 3 + [overhead.GLUE_KIND],
                         "mean_s": [5e-6, 5e-6, 9e-6, 3.5e-6, 3e-6, 1e-6, glue_s],
                         "std_s": [None] * 6 + [std_s], "n": [10] * 6 + [rounds]})


def test_glue_timed_without_the_profiler_replaces_the_traced_gaps_beyond_their_noise():
    """Where the model's step minus its replay, timed without the profiler, exceeds the traced gaps' sum by more
    than its noise, every call's gap grows by one amount, so that the workload's own calls cost the timed glue;
    within its noise the traced gaps stand."""
    types = pd.DataFrame({"op_type": ["aten::add"], "calls": [10.0], "cpu_s": [1e-4], "device_s": [None],
                          "launches": [0.0]})
    resolved = overhead.OverheadModel.from_tables(_glue_stats(123e-6, 5e-6), types)
    assert resolved.gap_s({"aten::add": 10}) == pytest.approx(123e-6)
    assert resolved.t1["aten::add"] == pytest.approx(1.5e-6 + 10e-6)
    assert resolved.t1_default == pytest.approx(2e-6 + 10e-6)  # an op type the trace lacks: the same shift
    noisy = overhead.OverheadModel.from_tables(_glue_stats(123e-6, 200e-6), types)
    assert noisy.gap_s({"aten::add": 10}) == pytest.approx(23e-6)
    without = _glue_stats(123e-6, 5e-6).iloc[:-1]
    assert overhead.OverheadModel.from_tables(without, types).gap_s({"aten::add": 10}) == pytest.approx(23e-6)
    # a glue below zero counts as zero: within its noise of the traced 23 µs they stand, beyond it they go
    below = overhead.OverheadModel.from_tables(_glue_stats(-60e-6, 30e-6), types)  # |0 - 23| <= 2 x 1.2533 x 30/√7
    assert below.gap_s({"aten::add": 10}) == pytest.approx(23e-6)
    far = overhead.OverheadModel.from_tables(_glue_stats(-60e-6, 2e-6), types)
    assert far.gap_s({"aten::add": 10}) == pytest.approx(0.0)


@pytest.mark.timing
def test_glue_timing_finds_the_work_a_step_does_beyond_its_operators():
    """A real pair: the "model" runs the operators' matrix product and two more of the same size; the operators'
    side is the sum over calls of each call's median seconds."""
    import time

    from opcost.measure.glue import time_glue

    a = torch.randn(96, 96)

    def operators():
        t0 = time.perf_counter()
        torch.mm(a, a)
        return [time.perf_counter() - t0]

    def step():
        for _ in range(3):
            torch.mm(a, a)

    g = time_glue(step, operators, rounds=3, min_block_s=0.005, max_s=1.0)
    assert g.rounds == 3 and g.model_s > g.operators_s > 0
    assert g.glue_s == pytest.approx(g.model_s - g.operators_s, rel=0.5) and g.glue_s > 0 and g.std_s >= 0
    # two more products: more than one product's worth (the ratio to the operators is 2 give or take the Python
    # calls around each product; 3.0 was seen on a loaded machine, so no upper bound tighter than the step itself)
    assert g.glue_s > g.operators_s, (g.glue_s, g.operators_s)


def test_the_glue_is_timed_against_one_rotation_round_of_the_workloads_operators(monkeypatch):
    """operator_round: one iteration's operator calls as isolated profiling times them, one time per call of the
    iteration, in call order, with the model's reference iteration between rounds as the profile stage has it; a
    configuration that cannot be built is left out and named."""
    from opcost.database import catalog
    from opcost.measure import rotation_engine
    from opcost.measure.operator_round import operator_round
    from opcost.model.extract import extract
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    models = {"mlp": {"model": "tests.tiny_models:make_mlp", "kwargs": {"width": 16}, "input_shapes": [[8]]}}
    layers = extract(make_workload(load_model("mlp", models["mlp"]), 2, "inference"))
    configs = catalog(layers)
    steps = []
    real = rotation_engine._iteration

    def counted(key, cache):
        step = real(key, cache)
        return lambda: steps.append(step())

    monkeypatch.setattr(rotation_engine, "_iteration", counted)
    run, failed = operator_round(configs, models, e2e_every=2)
    times = run()
    assert not failed and len(times) == int(layers["count"].sum()) and all(t > 0 for t in times)
    lead = len(steps)  # the lead-in, timed once when the round was built, and the first round's reference
    assert [len(run()) for _ in range(4)] == [len(times)] * 4  # the operator calls only, every round
    assert len(steps) > lead  # the model's reference iteration closed every second round, after its lead-in
    broken = configs.copy()
    broken.loc[0, "replay"] = broken.loc[0, "replay"].replace('"path":"fc1"', '"path":"no_such_layer"')
    run, failed = operator_round(broken, models)
    assert list(failed) == [broken.loc[0, "config_id"]]
    assert len(run()) == int(layers["count"].sum()) - int(layers.loc[layers["config_id"] == broken.loc[0, "config_id"],
                                                                         "count"].sum())


def test_traced_workload_has_its_glue_row_outside_training(tmp_path):
    """trace_workload times the glue of an inference workload on a CPU (a `G` row the overhead model reads) and
    not of a training one, whose replay holds no backward."""
    from opcost.config import validate
    from opcost.model.sources import load_model

    models = validate({"models": {"mlp": {"model": "tests.tiny_models:make_mlp", "input_shapes": [[8]]}}})["models"]
    kinds = {}
    for mode in ("inference", "training"):
        wl = make_workload(load_model("mlp", models["mlp"]), 2, mode)
        parts = tracing.trace_workload(wl, models, tmp_path / f"{mode}.json", iterations=2, warmup=1).parts
        kinds[mode] = set(parts["trace_overheads"]["kind"])
    assert overhead.GLUE_KIND in kinds["inference"] and overhead.GLUE_KIND not in kinds["training"]


def test_a_trace_taken_now_runs_in_a_process_of_its_own():
    """opcost predict's short trace of a model never traced: the same tables as the trace stage's (through one
    trace_workload), recorded in a fresh process set up as the measuring ones are, so that the caller keeps its
    own thread count; a refusal there (an OpcostError) reaches the caller as one."""
    from opcost.config import validate

    models = validate({"models": {"mlp": {"model": "tests.tiny_models:make_mlp", "input_shapes": [[8]]}}})["models"]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        parts = tracing.trace_now(("mlp", models["mlp"]), 2, "inference", {"device": "cpu", "threads": 2})
        assert torch.get_num_threads() == 1  # the caller's process as it was
    finally:
        torch.set_num_threads(before)
    assert set(parts) == {"trace_op_types", "trace_iterations", "trace_op_kernels", "trace_overheads",
                          "trace_overhead_samples"}
    assert len(parts["trace_iterations"]) == tracing.TRACE_NOW["iterations"]
    stats = parts["trace_overheads"]
    assert {"T1", overhead.REPLAY_KIND} <= set(stats["kind"]) and (stats["model"] == "mlp").all()
    assert "aten::linear" in set(parts["trace_op_types"]["op_type"])
    with pytest.raises(OpcostError, match="nowhere"):
        tracing.trace_now(("nowhere", {"model": "tests.tiny_models:no_such_factory"}), 2, "inference", {})


@pytest.mark.parametrize("paired", [True, False])
def test_backward_node_gaps_add_nothing(paired):
    """Against isolated costs (a paired trace) the engine's work between backward nodes is inside the isolated
    backward rows: a backward node's gap is not netted of the forward replay's pooled gap (which would make it
    negative) and adds nothing. Against the trace's own op times (unpaired) the gap counts, as every other."""
    node = overhead.ENGINE_NODE + "AddmmBackward0"
    stats = pd.DataFrame({"op_type": ["aten::add", node, ta.ALL_TYPES, ta.END, "aten::add", ta.ALL_TYPES,
                                      ta.END],
                          "kind": ["T1"] * 4 + [overhead.REPLAY_KIND] * 3,
                          "mean_s": [5e-6, 4e-6, 5e-6, 9e-6, 3.5e-6, 11e-6, 1e-6]})
    if not paired:
        stats = stats[stats["kind"] == "T1"]
    types = pd.DataFrame({"op_type": ["aten::add", node], "calls": [10.0, 10.0], "cpu_s": [1e-4, 2e-4],
                          "device_s": [None, None], "launches": [0.0, 0.0]})
    model = overhead.OverheadModel.from_tables(stats, types)
    assert model.t1[node] == (0.0 if paired else 4e-6)
    assert model.t1["aten::add"] == pytest.approx(1.5e-6 if paired else 5e-6)
    assert model.gap_s({"aten::add": 10, node: 10}) == pytest.approx(10 * (model.t1["aten::add"] + model.t1[node])
                                                                      + model.tail)


def test_a_configuration_that_cannot_replay_leaves_the_trace_without_it(tmp_path):
    from opcost import io, stages, tables
    from opcost.config import validate

    cfg = validate({"models": {"picky": {"model": "tests.tiny_models:make_picky", "input_shapes": [[8]]}},
                    "threads": 1, "trace": {"iterations": 2, "warmup": 1}})
    outs = {part: tmp_path / f"{part}.parquet" for part in stages.TRACE_PARTS}
    stages.trace(cfg, "picky", "inference", 2, tmp_path / "t.json.gz", outs, out_failures=tmp_path / "f.parquet")
    fail = io.read_parquet(tmp_path / "f.parquet", tables.FAILURES)
    assert fail[["stage", "workload", "op_type"]].values.tolist() == [["trace", "picky/inference/b2", "Picky"]]
    assert fail["reason"].iloc[0] == "left out of the replayed iterations: ValueError: picky: inputs must be positive"
    tt = trace_parse.parse(tmp_path / "t.json.gz")
    model_ops = ta.op_calls(tt)["op_type"].tolist()
    replay_ops = ta.op_calls(tt.with_marker(rec.REPLAY_MARKER))["op_type"].tolist()
    assert model_ops.count("aten::mul") == 2 and tt.n_iterations == 2  # Picky's checks and x * 2 run in the model
    assert replay_ops == ["aten::linear", "aten::abs", "aten::add", "aten::sum"] * 2  # the rest, without Picky
    assert "T1r" in set(io.read_parquet(outs["overheads"], trace_tables.TRACE_OVERHEADS)["kind"])


# A real CUDA trace: tiny_dlrm inference at batch 8 on an NVIDIA H200 (torch 2.11, tests/data/gpu.yaml), five
# iterations each followed by one replay of the workload's operators.
CUDA_TRACE = Path(__file__).parent / "data" / "cuda_trace_tiny_dlrm_inference_b8.json.gz"


@pytest.fixture(scope="module")
def cuda_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("cuda") / CUDA_TRACE.name  # parse caches its tables beside the trace
    shutil.copy(CUDA_TRACE, path)
    return trace_parse.parse(path)


def test_a_real_cuda_trace_links_every_kernel_to_its_launch_and_op(cuda_trace):
    tt = cuda_trace
    assert tt.has_device and tt.n_iterations == 5
    assert tt.kernels["launch_id"].notna().all() and tt.kernels["top_op"].notna().all()
    per_iteration = tt.kernels.dropna(subset=["iteration"]).groupby("iteration").size()
    assert len(per_iteration) == 5 and per_iteration.nunique() == 1  # the same kernels every iteration
    calls = ta.op_calls(tt)
    types = ta.op_types(tt, calls)
    assert types["launches"].sum() == per_iteration.iloc[0]  # per iteration
    assert {"aten::linear", "aten::embedding_bag", "aten::bmm"} <= set(types["op_type"])
    kernels = ta.op_kernels(tt)
    assert (kernels["count"] > 0).all() and kernels["kernel"].str.len().gt(0).all()


def test_a_real_cuda_trace_is_launch_bound_and_its_overheads_add_up(cuda_trace):
    """A small model on a large GPU: the device is busy a few percent of each iteration, so the iteration is the CPU's
    launch path, which the T1-T5 overhead model (plus device time) must reproduce."""
    tt = cuda_trace
    calls = ta.op_calls(tt)
    its = ta.iterations(tt, calls)
    assert (its["device_busy_s"] > 0).all() and (its["device_busy_s"] < 0.2 * its["span_s"]).all()
    assert (its["cpu_busy_s"] <= its["span_s"]).all()
    stats = ta.overheads(ta.overhead_samples(tt, calls))
    assert {"T1", "T2", "T3", "T4", "T5"} <= set(stats.loc[stats["op_type"] == "<all>", "kind"])
    check = overhead.trace_prediction(tt)
    assert check["plain_error"] < -0.8  # device time alone misses most of the iteration
    assert abs(check["error"]) < 0.1, check  # device time + modelled CPU overheads: within 10%
    replay = tt.with_marker(rec.REPLAY_MARKER)
    assert replay.n_iterations == 5 and replay.has_device


# The same model in training (same run): forward, loss and backward every iteration, the backward's kernels launched
# from the autograd engine's thread.
CUDA_TRAINING_TRACE = CUDA_TRACE.with_name("cuda_trace_tiny_dlrm_training_b8.json.gz")


def test_a_real_cuda_training_trace_links_backward_kernels_to_their_autograd_nodes(tmp_path):
    path = tmp_path / CUDA_TRAINING_TRACE.name
    shutil.copy(CUDA_TRAINING_TRACE, path)
    tt = trace_parse.parse(path)
    assert tt.has_device and tt.n_iterations == 5
    assert tt.kernels["launch_id"].notna().all() and tt.kernels["top_op"].notna().all()
    per_iteration = tt.kernels.dropna(subset=["iteration"]).groupby("iteration").size()
    assert per_iteration.nunique() == 1
    types = ta.op_types(tt, ta.op_calls(tt)).set_index("op_type")
    backward = types[types.index.str.startswith("autograd::engine::evaluate_function")]
    assert {"EmbeddingBagBackward0", "AddmmBackward0", "BmmBackward0"} <= {t.split(": ")[-1] for t in backward.index}
    # the backward launches most of the iteration's kernels (embedding-bag backward alone several per call)
    assert backward["launches"].sum() > types["launches"].sum() / 2
    assert types["launches"].sum() == per_iteration.iloc[0]
    check = overhead.trace_prediction(tt)
    assert check["plain_error"] < -0.8 and abs(check["error"]) < 0.1, check
    assert tt.with_marker(rec.REPLAY_MARKER).n_iterations == 5  # forward replays paired with the iterations
