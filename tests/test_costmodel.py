"""Predicting what was never measured: features, the fitted cost model, `opcost predict` on unseen workloads."""
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from opcost import database
from opcost.analysis import estimate, overhead_sources
from opcost.analysis.costmodel import METHODS, CostModel
from opcost.analysis.laws import fit_law, measures
from opcost.analysis.features import configuration_features, features
from opcost.analysis.predict import DEFAULT_STATISTIC, STATISTICS
from opcost.errors import OpcostError


def _spec(shape, dtype="float32"):
    return {"T": list(shape), "dtype": dtype}


def test_conv2d_features_by_hand():
    params = {"in_channels": 3, "out_channels": 8, "kernel_size": [3, 3], "stride": [1, 1], "groups": 1,
              "bias": True, "param_dtype": ["float32"]}
    f = configuration_features("Conv2d", json.dumps(params), json.dumps([_spec([2, 3, 16, 16])]),
                               json.dumps([_spec([2, 8, 16, 16])]))
    out = 2 * 8 * 16 * 16
    assert f["flops"] == 2 * out * 3 * 9
    weights = (8 * 3 * 9 + 8) * 4
    assert f["param_bytes"] == weights
    assert f["bytes"] == (2 * 3 * 16 * 16 + out) * 4 + weights
    assert (f["kernel"], f["stride"], f["groups"], f["channels"]) == (9, 1, 1, 3)


def test_linear_matmul_and_elementwise_features_by_hand():
    lin = configuration_features("Linear", {"in_features": 64, "out_features": 32, "bias": False},
                                 [_spec([5, 64])], [_spec([5, 32])])
    assert lin["flops"] == 2 * 5 * 32 * 64 and lin["param_bytes"] == 64 * 32 * 4
    bmm = configuration_features("bmm", {}, [_spec([4, 10, 16]), _spec([4, 16, 12])], [_spec([4, 10, 12])])
    assert bmm["flops"] == 2 * 4 * 10 * 12 * 16
    addmm = configuration_features("addmm", {}, [_spec([32]), _spec([5, 64]), _spec([64, 32])], [_spec([5, 32])])
    assert addmm["flops"] == lin["flops"] and addmm["reduce_dim"] == 64  # the bias is added, not reduced
    add = configuration_features("add", {}, [_spec([7, 9]), _spec([7, 9], "float16")], [_spec([7, 9])])
    assert add["flops"] == 63 and add["bytes"] == 63 * 4 + 63 * 2 + 63 * 4
    sdpa = configuration_features("scaled_dot_product_attention", {}, [_spec([2, 4, 10, 8]), _spec([2, 4, 12, 8]),
                                                                       _spec([2, 4, 12, 8])], [_spec([2, 4, 10, 8])])
    assert sdpa["flops"] == 4 * 2 * 4 * 10 * 12 * 8


def test_pooling_counts_its_windows_and_backward_counts_what_it_writes():
    x, half, same = _spec([2, 16, 28, 28]), _spec([2, 16, 14, 14]), _spec([2, 16, 28, 28])
    strided = configuration_features("MaxPool2d", {"kernel_size": 3, "stride": 2, "padding": 1}, [x], [half])
    dense = configuration_features("MaxPool2d", {"kernel_size": 3, "stride": 1, "padding": 1}, [x], [same])
    assert (strided["flops"], dense["flops"]) == (2 * 16 * 14 * 14 * 9, 2 * 16 * 28 * 28 * 9)
    aten = configuration_features("max_pool2d", {"args": [x, [2, 2], [2, 2]]}, [x], [half])
    assert aten["flops"] == 2 * 16 * 14 * 14 * 4 and aten["kernel"] == 4
    # an embedding's dense gradient is the whole table; a sparse one only the rows touched
    emb = {"num_embeddings": 1000, "embedding_dim": 8, "sparse": False}
    ids, out = [_spec([4, 3], "int64")], [_spec([4, 3, 8])]
    fwd = configuration_features("Embedding", emb, ids, out, "training", "forward")
    bwd = configuration_features("Embedding", emb, ids, out, "training", "backward")
    sparse = configuration_features("Embedding", {**emb, "sparse": True}, ids, out, "training", "backward")
    assert fwd["param_bytes"] == sparse["param_bytes"] == 12 * 8 * 4
    assert bwd["param_bytes"] == (12 + 1000) * 8 * 4
    # select is a view forward; its backward writes a zero gradient of the input's size; view stays free
    sel = ({"args": [x, 0, 0]}, [x], [_spec([16, 28, 28])])
    assert configuration_features("select", *sel, "training", "forward")["bytes"] == 0
    assert configuration_features("select", *sel, "training", "backward")["bytes"] == (2 + 1) * 16 * 28 * 28 * 4
    assert configuration_features("view", {}, [x], [_spec([2, 16 * 28 * 28])], "training", "backward")["bytes"] == 0
    # dropout is an identity in inference and at p = 0
    drop = lambda p, mode: configuration_features("Dropout", {"p": p}, [x], [x], mode)["bytes"]  # noqa: E731
    assert drop(0.1, "inference") == drop(0.0, "training") == 0 and drop(0.1, "training") == 2 * math.prod(x["T"]) * 4


def test_op_type_table_names_each_type_once_with_known_work():
    from opcost.analysis import optypes

    assert optypes.family("ReLU6") == "activation" and "ReLU" in optypes.twins("ReLU6")
    assert optypes.family("bernoulli_") == "dropout" and optypes.twins("bernoulli_") == ()
    assert optypes.lookup("NoSuchOp") == optypes.OpType("NoSuchOp", None, None, "elementwise")
    with pytest.raises(ValueError, match="listed twice"):
        optypes._parse("ReLU activation relu elementwise\nReLU activation relu elementwise")
    with pytest.raises(ValueError, match="unknown work"):
        optypes._parse("ReLU activation relu nonsense")


def _synthetic(law, n=60, seed=0):
    """Linear configurations with costs from ``law(flops, bytes)`` times 3% log-normal noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        m, k, o = (int(v) for v in rng.integers(1, 512, 3))
        f = configuration_features("Linear", {"in_features": k, "out_features": o}, [_spec([m, k])], [_spec([m, o])])
        rows.append({"config_id": f"c{i}", "op_type": "Linear", "mode": "inference", "phase": "forward",
                     "params": json.dumps({"in_features": k, "out_features": o}),
                     "inputs": json.dumps([_spec([m, k])]), "outputs": json.dumps([_spec([m, o])]),
                     "seconds": law(f["flops"], f["bytes"]) * math.exp(rng.normal(0, 0.03))})
    return pd.DataFrame(rows)


def test_fit_recovers_a_synthetic_roofline_law():
    def truth(f, b):
        return 4e-6 + max(f / 2e10, b / 4e9)

    data = _synthetic(truth)
    law = fit_law(*(data.pipe(lambda d: pd.DataFrame([configuration_features(
        "Linear", p, i, o) for p, i, o in zip(d["params"], d["inputs"], d["outputs"])]))[["flops", "bytes"]].T.values),
        data["seconds"])
    assert law.floor_s == pytest.approx(4e-6, rel=0.15)
    assert law.compute_rate == pytest.approx(2e10, rel=0.15)
    assert law.memory_rate == pytest.approx(4e9, rel=0.25)
    model = CostModel.fit(data)
    held = model.heldout_summary()
    assert held["configurations"] == 60 and held["law"]["median_abs_error"] < 0.05
    fresh = _synthetic(truth, n=10, seed=1)
    est = model.estimate(fresh)
    ratio = est["estimate"] / fresh["seconds"]
    assert ratio.between(0.85, 1.15).all() and (est["low"] <= est["estimate"]).all()
    assert (est["estimate"] <= est["high"]).all() and set(est["method"]) <= {"law", "law+trees"}


def test_no_law_answers_faster_than_the_host_ever_ran():
    """Linears all bound by memory (1e9 bytes/s) leave their law's compute rate free; Conv2d-like calls of the same
    phase reached 5e10 FLOP/s. The law's compute rate is at most the fastest FLOP rate any call of the phase ran at,
    and a large matrix product estimated from it takes at least its FLOPs at that rate, not the memory-bound time a
    free compute rate would give it."""
    fast = _synthetic(lambda f, b: 1e-6 + max(f / 5e10, b / 4e9), n=30).assign(op_type="Conv2d")
    fast["config_id"] = "f" + fast["config_id"]
    slow = _synthetic(lambda f, b: 1e-6 + b / 1e9, n=30)
    model = CostModel.fit(pd.concat([fast, slow], ignore_index=True))
    both = pd.concat([fast, slow])
    peak = max(configuration_features("Linear", p, i, o)["flops"] / t
               for p, i, o, t in zip(both["params"], both["inputs"], both["outputs"], both["seconds"]))
    assert model.peaks[("inference", "forward")] == pytest.approx(peak)
    assert model.laws[("Linear", "inference", "forward")].compute_rate <= peak * (1 + 1e-9)
    big = {"in_features": 4096, "out_features": 4096}
    row = pd.DataFrame([{"config_id": "big", "op_type": "Linear", "mode": "inference", "phase": "forward",
                         "params": json.dumps(big), "inputs": json.dumps([_spec([2048, 4096])]),
                         "outputs": json.dumps([_spec([2048, 4096])])}])
    flops = configuration_features("Linear", big, [_spec([2048, 4096])], [_spec([2048, 4096])])["flops"]
    assert model.estimate(row, "law")["estimate"].iloc[0] >= flops / peak


def _elementwise(op_type, sizes, seconds, tag):
    """``op_type`` configurations on float32 tensors of ``sizes`` elements, ``seconds(i, bytes)`` each."""
    rows = []
    for i, n in enumerate(sizes):
        spec = json.dumps([_spec([int(n)])])
        nbytes = configuration_features(op_type, {}, [_spec([int(n)])], [_spec([int(n)])])["bytes"]
        rows.append({"config_id": f"{tag}{i}", "op_type": op_type, "mode": "inference", "phase": "forward",
                     "params": "{}", "inputs": spec, "outputs": spec, "seconds": seconds(i, nbytes)})
    return pd.DataFrame(rows)


def test_no_law_answers_slower_than_its_bytes_show():
    """Copies measured only at a few KB (index, stack, contiguous: 6-12 us, their per-call costs differing by type
    and so growing with the bytes) leave the copy family's memory rate unmeasured, while ReLUs from 40 KB to 400 MB
    ran at 1e10 bytes/s. A fit free to explain the small copies' differences with a slow rate would answer a 400 MB
    `cat` at that rate; the family's memory rate is at least the typical measured one, and the ReLUs' own law keeps
    what they measured."""
    relu = _elementwise("ReLU", np.geomspace(1e4, 1e8, 12), lambda i, b: 2e-6 + b / 1e10, "r")
    small = [_elementwise(t, [700, 1400, 2600], lambda i, b, k=k: (5 + 2 * k + 1.5 * i) * 1e-6, t[:2])
             for k, t in enumerate(["index", "stack", "contiguous"])]
    model = CostModel.fit(pd.concat([relu, *small], ignore_index=True))
    typical = model.typical[("inference", "forward")][1]  # (compute, memory)
    assert typical == pytest.approx(1e10, rel=0.1)
    assert model.laws[("ReLU", "inference", "forward")].memory_known
    family = model.family_laws[("copy", "inference", "forward")]
    assert not family.memory_known and family.memory_rate >= typical * (1 - 1e-9)
    big = _elementwise("cat", [1e8], lambda i, b: 0.0, "big")
    est = model.estimate(big.drop(columns="seconds"), "law")
    assert est["method"].iloc[0] != "global" and est["estimate"].iloc[0] <= 1.2 * (2e-6 + 8e8 / 1e10)
    free = fit_law([0.0] * 9, [2800, 5600, 10400] * 3, [(5 + 2 * k + 1.5 * i) * 1e-6 for k in range(3)
                                                         for i in range(3)])
    assert free.memory_rate < typical / 2  # what the fit does without the bound: the rate the test guards against


def test_a_call_that_a_slow_rate_overshoots_measures_no_rate():
    """A rate is measured by a call whose time it explains, not by one it overshoots: the copy family of a database
    whose coverage loop had profiled tiny_dlrm's `cat`, `stack` and `index` (a few µs on a few KB) fitted 1.1 GB/s,
    which would take a 0.9 MB `contiguous` of 36 µs 800 µs; that call counted as measuring the rate, and GhostNet's
    `cat` came out at 20 times its cost."""
    seconds = [2.4e-6, 6.5e-6, 13.7e-6, 36e-6]
    nbytes = [2448, 10368, 2682, 884736]
    assert not measures(nbytes, seconds, 1.1e9)  # the large call: 22 times its time
    assert measures(nbytes, seconds, 884736 / 36e-6)  # the rate it ran at
    assert measures(nbytes, seconds, 884736 / 60e-6)  # within twice its time
    assert not measures(nbytes[:3], seconds[:3], 10368 / 6.5e-6)  # within 4x the cheapest call: per-call costs


def test_an_interval_rests_on_the_errors_of_the_calls_that_carry_the_time():
    """Linears of eight models: the cheaper half timed with 40% noise (µs-scale calls), the costlier half with 3%.
    A model's total is carried by its costly calls; the op type's 90% interval is read from held-out errors
    weighted by their share of their model's time, and is far narrower than the same errors counted one each."""
    rows = _synthetic(lambda f, b: 2e-6 + max(f / 5e10, b / 4e9), n=96, seed=3)
    cheap = rows["seconds"] < rows["seconds"].median()
    rows.loc[cheap, "seconds"] *= np.exp(np.random.default_rng(4).normal(0, 0.4, int(cheap.sum())))
    rows["workload"] = [f"m{i % 8}/inference/b1" for i in range(len(rows))]
    model = CostModel.fit(rows)
    lo, hi = model.quantiles["Linear"]
    errors = model.heldout["chosen"]
    assert hi - lo < 0.5 * float(errors.quantile(0.95) - errors.quantile(0.05))
    costly = model.heldout["measured"] >= model.heldout["measured"].median()
    assert errors[costly].between(lo, hi).mean() >= 0.8  # the range holds the costly calls' errors


def test_a_models_interval_is_the_predictive_range_of_the_held_out_models_sums():
    """Linears of eight models, each call timed with 40% noise of its own and each model 5% off as a whole: a
    single estimate's 90% range spans the calls' noise, but a model's summed estimate averages it over its calls.
    A model's interval is read from the held-out models' summed errors (their root mean square, Student's t with as
    many degrees of freedom as models held out), narrower than a single costly estimate's, and wide enough for the
    held-out models themselves."""
    from scipy.stats import t

    from opcost.analysis import heldout

    rows = _synthetic(lambda f, b: 2e-6 + max(f / 5e10, b / 4e9), n=120, seed=5)
    rng = np.random.default_rng(6)
    lean = dict(enumerate(rng.normal(0, 0.05, 8)))
    rows["workload"] = [f"m{i % 8}/inference/b1" for i in range(len(rows))]
    rows["seconds"] *= np.exp(rng.normal(0, 0.4, len(rows)) + [lean[i % 8] for i in range(len(rows))])
    model = CostModel.fit(rows)
    half, models = model.model_error["inference"]
    assert models == 8
    sums = heldout.workload_errors(model.heldout, ["chosen"])["chosen"]
    assert len(sums) == 8
    rms = float(np.sqrt(np.mean(sums ** 2)))
    assert half == pytest.approx(rms * t.ppf(0.95, 8) * math.sqrt(1 + 1 / 8))
    assert (sums.abs() <= half).all()  # it holds the held-out models
    lo, hi = model.interval_of("Linear", "law")
    assert half < 0.75 * (hi - lo) / 2  # a model's sum errs less than one of its costly calls
    # fewer than two models held out: none (a prediction composes its estimates' own ranges instead)
    assert heldout.model_spread(pd.DataFrame({"workload": ["a/inference/b1", "a/inference/b8"],
                                              "chosen": [0.1, 0.2]}), "chosen") is None


def _relu_workload(rng, n, mode, context, factor, tag) -> pd.DataFrame:
    """``n`` ReLU configurations measured among workload ``tag`` of context ``context`` (log10 bytes), costing
    ``factor`` times a roofline law (2% noise)."""
    from opcost.analysis.costmodel import CONTEXT

    out = []
    for i in range(n):
        shape = [int(v) for v in rng.integers(1, 64, 2)] + [int(rng.integers(8, 64))] * 2
        f = configuration_features("ReLU", "{}", [_spec(shape)], [_spec(shape)])
        out.append({"config_id": f"{tag}{i}", "op_type": "ReLU", "mode": mode, "phase": "forward", "params": "{}",
                    "inputs": json.dumps([_spec(shape)]), "outputs": json.dumps([_spec(shape)]), CONTEXT: context,
                    "workload": f"{tag}/{mode}/b1", "count": 1 + i % 3,
                    "seconds": (2e-6 + f["bytes"] / 5e9) * factor * math.exp(rng.normal(0, 0.02))})
    return pd.DataFrame(out)


def test_the_trees_learn_what_the_surrounding_workload_adds_to_a_call():
    """A call costs more among operators that move more data (they leave less of the caches to it): the same kind
    of configurations measured among seven workloads, small to large. The cross-validation holds out whole
    workloads, and the context trees, which see the bytes the workload moves, win; an estimate for a small or a large
    workload follows its context."""
    from opcost.analysis.costmodel import CONTEXT

    rng = np.random.default_rng(0)

    def rows(n, context, tag):  # 1x at 10^6 bytes, 2.2x at 10^9
        return _relu_workload(rng, n, "inference", context, 1 + 0.4 * (context - 6), tag)

    data = pd.concat([rows(20, c, f"w{c}_") for c in np.arange(6, 9.01, 0.5)], ignore_index=True)
    model = CostModel.fit(data)
    held = model.heldout_summary()
    assert model.chosen_by_mode == {"inference": ("law+trees+context",)}
    # a held-out workload is interpolated between its neighbours' contexts (or extrapolated at the ends)
    ctx, blind = held["law+trees+context"], held["law+trees"]
    assert ctx["median_abs_error"] < 0.6 * blind["median_abs_error"] and ctx["within_25pct"] > 0.9
    for context in (6, 9):
        fresh = rows(10, context, "new")
        est = model.estimate(fresh)
        ratio = est["estimate"] / fresh["seconds"]
        assert ratio.between(0.85, 1.15).all(), (context, ratio.round(2).tolist())
        assert set(est["method"]) == {"law+trees+context"}
    blind = model.estimate(rows(5, 7, "x").drop(columns=CONTEXT))  # a caller without the context: still an estimate
    assert np.isfinite(blind["estimate"]).all() and (blind["estimate"] > 0).all()


def test_each_mode_takes_the_method_with_the_lowest_held_out_error():
    """The method is chosen per mode on the configurations of models held out whole: in inference the context
    explains the workloads' costs and its trees win; in training each workload is off by its own factor (alternately
    1.5x and 0.67x along the context), which the context, one number per workload, can only memorise: a held-out
    workload gets its neighbours' factor, and the trees without the context win there. The held-out workloads'
    sums, reported beside, weigh each configuration by its calls."""
    from opcost.analysis.heldout import workload_errors

    rng = np.random.default_rng(1)

    def rows(mode, context, factor, tag):
        return _relu_workload(rng, 20, mode, context, factor, tag).to_dict("records")

    data = [r for c in np.arange(6, 9.01, 0.5) for r in rows("inference", c, 1 + 0.4 * (c - 6), f"i{c}")]
    data += [r for k, c in enumerate(np.arange(10.25, 13, 0.5))
             for r in rows("training", c, math.exp(0.4 * (-1) ** k), f"t{k}")]
    model = CostModel.fit(pd.DataFrame(data))
    assert model.chosen_by_mode == {"inference": ("law+trees+context",), "training": ("law+trees",)}
    sums = workload_errors(model.heldout, model.methods())
    assert len(sums) == 7 + 6 and set(sums["configs"]) == {20}
    tr = sums[sums["mode"] == "training"]
    # the neighbours' factor (the correction, never falling as the context grows, follows the alternation only in
    # part)
    assert tr["law+trees+context"].abs().mean() > tr["law+trees"].abs().mean() + 0.05
    w = model.heldout[model.heldout["workload"] == "t0/training/b1"]  # one workload's sum, by hand: count-weighted
    assert sums.set_index("workload").loc["t0/training/b1", "law"] == pytest.approx(
        math.log((w["count"] * w["measured"] * np.exp(w["law"])).sum() / (w["count"] * w["measured"]).sum()))


def test_methods_the_held_out_errors_cannot_tell_apart_are_averaged_and_a_better_one_is_taken_alone():
    """Held-out errors within one standard error of the best: the context trees, a few percent better than the
    shape trees on the held-out configurations of twelve models, are within the noise of which models were held
    out, and both are averaged (their estimates' geometric mean); halving the error takes the context trees alone.
    The law, twice the trees' error, never."""
    from opcost.analysis.heldout import bootstrap_se

    rng = np.random.default_rng(3)
    models = np.repeat([f"m{k}/inference/b1" for k in range(12)], 30)
    offset = np.repeat(rng.normal(0, 0.15, 12), 30)  # a model's configurations err together
    trees = offset + rng.normal(0, 0.3, len(models))
    model = CostModel(target="seconds", trees=dict.fromkeys(("law+trees", "law+trees+context")))

    def held(context):
        return pd.DataFrame({"config_id": [f"c{i}" for i in range(len(models))], "workload": models,
                             "law": 2 * trees, "law+trees": trees, "law+trees+context": context})

    near = held(trees * 0.96)
    se = bootstrap_se(near["law+trees+context"].abs(), near["workload"])
    gain = np.median(np.abs(trees)) - near["law+trees+context"].abs().median()
    assert gain < se < 0.5 * np.median(np.abs(trees))  # the noise of which models were held out exceeds the gain
    assert model._choose(near) == ("law+trees", "law+trees+context")
    assert model._choose(held(trees * 0.5)) == ("law+trees+context",)


def test_a_models_batch_sizes_are_held_out_together():
    """A model at two batch sizes shares its layers' shapes between them. Held out as a model never profiled, both
    go: model a, whose every call costs twice the other models', is estimated at their cost, not at its other batch
    size's (which the trees, seeing the same shapes, would copy). Sweep points are never held out."""
    rng = np.random.default_rng(2)
    others = [_relu_workload(rng, 20, "inference", 7.0, 1.0, f"o{k}") for k in range(5)]
    a1 = _relu_workload(rng, 20, "inference", 7.0, 2.0, "a")
    a4 = a1.assign(config_id=a1["config_id"] + "b4", workload="a/inference/b4")
    sweep = _relu_workload(rng, 10, "inference", 6.0, 1.0, "sweep-ReLU-n1")
    model = CostModel.fit(pd.concat([*others, a1, a4, sweep], ignore_index=True))
    held = model.heldout[model.heldout["workload"].str.startswith("a/")]
    assert len(held) == 40 and (held["law+trees"] < -0.4).all(), held["law+trees"].describe()
    # sweep points stay in every fold's training, as in the database a model never profiled is predicted from
    assert len(model.heldout) == 140 and not model.heldout["workload"].str.startswith("sweep-").any()


def test_each_measurement_is_tied_to_the_bytes_its_workload_moves(tiny_run):
    """The context of a measured configuration is the workload it was profiled among (the `configs` table's
    `workload`): log10 of Σ count x bytes over that workload's forward operators."""
    from opcost.analysis.costmodel import CONTEXT
    from opcost.analysis.training import context_bytes, training_data
    from opcost.analysis.features import features
    from opcost.analysis.predict import DEFAULT_STATISTIC, STATISTICS
    from opcost.model.workload import workload_key

    db = database.read_db(tiny_run / "results" / "db")
    layers = db["layers"]
    ctx = context_bytes(layers)
    wl = database.of_workload(layers, "mlp", 2, "inference")
    moved = (wl["count"] * features(wl.assign(phase="forward"))["bytes"]).sum()
    assert ctx[workload_key("mlp", "inference", 2)] == pytest.approx(math.log10(moved)) and moved > 1e3
    used, _ = estimate.conditions(db["measurements"])
    data = training_data(layers, used, STATISTICS[DEFAULT_STATISTIC], db["configs"])
    among = data["config_id"].map(db["configs"].set_index("config_id")["workload"])
    assert data[CONTEXT].notna().all() and np.allclose(data[CONTEXT], among.map(ctx))
    assert data[CONTEXT].nunique() > 1  # several workloads, several contexts


def _cat(batch, context, seconds=None):
    """The cache update of a decode step: keys of ``context`` cached tokens and the step's one, concatenated."""
    ins = [_spec([batch, 2, context, 64]), _spec([batch, 2, 1, 64])]
    return {"config_id": f"cat{batch}x{context}", "op_type": "cat", "mode": "inference", "phase": "forward",
            "params": json.dumps({"args": [ins, -2], "kwargs": None}), "inputs": json.dumps(ins),
            "outputs": json.dumps([_spec([batch, 2, context + 1, 64])]), "seconds": seconds}


def test_a_configuration_between_two_measured_on_its_shape_line_is_interpolated():
    """Measured at 256, 1,024 and 4,096 cached tokens with a last-level-cache crossing between the last two (per
    byte 2.5x dearer at 4,096), the cache update at 2,048 takes the log-log interpolation of 1,024 and 4,096; beyond
    the largest measured, at a batch and context on no common line, or in another dtype, the law answers."""
    cost = {256: 20e-6, 1024: 80e-6, 4096: 800e-6}
    data = pd.concat([_synthetic(lambda f, b: 1e-6 + b / 5e9, n=30),
                      pd.DataFrame([_cat(4, c, t) for c, t in cost.items()])], ignore_index=True)
    model = CostModel.fit(data)
    asked = pd.DataFrame([_cat(4, 2048), _cat(4, 8192), _cat(2, 2048), _cat(4, 512)])
    half = asked.iloc[[0]].assign(inputs=json.dumps([_spec([4, 2, 2048, 64], "float16"),
                                                     _spec([4, 2, 1, 64], "float16")]))
    est = model.estimate(pd.concat([asked, half], ignore_index=True))
    assert list(est["method"]) == ["interpolated", "law", "law", "interpolated", "law"]
    nbytes = {c: configuration_features("cat", json.loads(r["params"]), json.loads(r["inputs"]),
                                        json.loads(r["outputs"]))["bytes"] for c, r in
              ((c, _cat(4, c)) for c in (256, 512, 1024, 2048, 4096))}

    def between(c, lo, hi):
        w = math.log(nbytes[c] / nbytes[lo]) / math.log(nbytes[hi] / nbytes[lo])
        return cost[lo] * (cost[hi] / cost[lo]) ** w

    assert est["estimate"].iloc[0] == pytest.approx(between(2048, 1024, 4096), rel=1e-6)
    assert est["estimate"].iloc[0] > 2.5 * cost[1024]  # the crossing kept, where one law averages it out
    assert est["estimate"].iloc[3] == pytest.approx(between(512, 256, 1024), rel=1e-6)  # the nearest pair


def _head(vocab, rows=64, features=256, seconds=None):
    """A language model's head: one Linear from ``features`` to ``vocab`` logits, no bias."""
    return {"config_id": f"head{vocab}x{rows}x{features}", "op_type": "Linear", "mode": "inference",
            "phase": "forward", "inputs": json.dumps([_spec([1, rows, features])]),
            "outputs": json.dumps([_spec([1, rows, vocab])]), "seconds": seconds,
            "params": json.dumps({"bias": False, "in_features": features, "out_features": vocab,
                                  "param_dtype": ["float32"]})}


def test_a_head_between_two_measured_vocabularies_is_interpolated():
    """A module's sizes are on its shape line's dims (its output's, for a Linear's out_features): a head over a
    vocabulary of 50,256 lies between heads of 32,000 and 65,536; one at another width or another bias is on another
    line, and an embedding table of another size (not a tensor of the call) never brackets one. Output rows of no
    multiple of 16 bytes are a line of their own (the costs as one thread measured them): GPT-2's 50,257 logits lie
    between 30,522 and 65,537, slower per FLOP than their aligned neighbours."""
    cost = {32000: 17.2e-3, 65536: 39.3e-3, 30522: 22.6e-3, 65537: 52.5e-3}
    data = pd.concat([_synthetic(lambda f, b: 1e-6 + b / 5e9, n=30),
                      pd.DataFrame([_head(v, seconds=t) for v, t in cost.items()])], ignore_index=True)
    model = CostModel.fit(data)
    biased = _head(50256) | {"params": json.dumps({"bias": True, "in_features": 256, "out_features": 50256,
                                                  "param_dtype": ["float32"]})}
    est = model.estimate(pd.DataFrame([_head(50256), _head(50256, features=512), biased, _head(131072),
                                       _head(50257)]))
    assert list(est["method"]) == ["interpolated", "law", "law", "law", "interpolated"]
    aligned, odd = est["estimate"].iloc[0], est["estimate"].iloc[4]
    assert cost[32000] < aligned < cost[65536] and cost[30522] < odd < cost[65537]
    assert odd > 1.25 * aligned  # one logit more, the misaligned rate

    from opcost.analysis.shape_lines import line_of

    def lookup(num):
        p = {"embedding_dim": 64, "num_embeddings": num, "padding_idx": None}
        return line_of("Embedding", "inference", "forward", json.dumps(p), json.dumps([_spec([1, 128], "int64")]),
                       json.dumps([_spec([1, 128, 64])]))

    assert lookup(1000)[0] != lookup(50000)[0] and lookup(1000)[1] == lookup(50000)[1]


def test_types_without_a_law_fall_back_to_labelled_rules():
    data = _synthetic(lambda f, b: 1e-6 + b / 5e9, n=30)
    relu = {"config_id": "r0", "op_type": "ReLU", "mode": "inference", "phase": "forward", "params": "{}",
            "inputs": json.dumps([_spec([100, 100])]), "outputs": json.dumps([_spec([100, 100])]), "seconds": 1e-5}
    model = CostModel.fit(pd.concat([data, pd.DataFrame([relu])], ignore_index=True))
    wide = json.dumps([_spec([200, 100])])
    asked = pd.DataFrame([{**relu, "inputs": wide, "outputs": wide}, {**relu, "op_type": "GELU"},
                          {**relu, "op_type": "my_op"}])
    est = model.estimate(asked)
    assert list(est["method"]) == ["nearest", "family", "global"]  # GELU: from the one activation measured
    assert est["estimate"].iloc[1] == pytest.approx(1e-5)  # the same shape as the ReLU
    g = model.global_laws[("inference", "forward")]
    big, small = (configuration_features("ReLU", "{}", json.dumps([_spec(s)]), json.dumps([_spec(s)]))
                  for s in ([200, 100], [100, 100]))
    scale = g(big["flops"], big["bytes"]) / g(small["flops"], small["bytes"])
    assert 1 < scale < 2  # twice the bytes, along a law with a floor
    assert est["estimate"].iloc[0] == pytest.approx(1e-5 * scale)  # the one ReLU scaled along the law
    assert est["estimate"].gt(0).all()


def test_a_view_does_no_work_and_an_unmeasured_type_takes_its_twins_or_its_familys_law():
    """Views (and dropout in inference) cost a per-call constant whatever the size; an op type never measured takes
    the law of a measured twin (ReLU6, a clamp: ReLU's), else its family's measured types' (Mish: ReLU and GELU)."""
    view = configuration_features("select", {}, [_spec([4, 128, 256])], [_spec([4, 256])])
    strided = {"T": [256, 128], "dtype": "float32", "stride": [1, 256]}
    copy = configuration_features("contiguous", {}, [strided], [_spec([256, 128])])
    drop = [configuration_features("Dropout", {"p": 0.1}, [_spec([64, 64])], [_spec([64, 64])], mode)
            for mode in ("inference", "training")]
    assert view["flops"] == view["bytes"] == 0 and copy["bytes"] == 2 * 256 * 128 * 4
    # a reshape copies a strided input only to a contiguous output; one that keeps the input's strides is a view
    # (GPT-2 reshapes its transposed attention output to its own shape)
    assert configuration_features("reshape", {}, [strided], [_spec([256 * 128])])["bytes"] == 2 * 256 * 128 * 4
    assert configuration_features("reshape", {}, [strided], [strided])["bytes"] == 0
    assert drop[0]["bytes"] == 0 < drop[1]["bytes"]
    # a `to` returns its input where the dtype stays and no device is named; a conversion or a move copies
    half = {**_spec([64, 64]), "dtype": "float16"}
    cast = [configuration_features("to", {"args": [_spec([64, 64]), {"S": to}]}, [_spec([64, 64])], [out])
            for to, out in (("torch.float32", _spec([64, 64])), ("torch.float16", half), ("cuda:0", _spec([64, 64])))]
    assert cast[0]["bytes"] == 0 < cast[1]["bytes"] < cast[2]["bytes"]

    def act(op, n, seconds):
        shape = json.dumps([_spec([n, 64])])
        return {"config_id": f"{op}{n}", "op_type": op, "mode": "inference", "phase": "forward", "params": "{}",
                "inputs": shape, "outputs": shape, "seconds": seconds}

    law = lambda n: 2e-6 + n * 64 * 8 / 4e9  # noqa: E731  (bytes in and out over 4 GB/s)
    rows = [act(op, n, law(n) * cost) for op, cost in (("ReLU", 1), ("GELU", 4)) for n in (16, 64, 256, 1024, 4096)]
    rows += [act(f"v{i}", n, 3e-6) for i, n in enumerate((16, 1024, 4096))]  # not a family: for the global law
    model = CostModel.fit(pd.concat([_synthetic(lambda f, b: 1e-6 + b / 5e9, n=20), pd.DataFrame(rows)],
                                    ignore_index=True))
    asked = pd.DataFrame([act(op, n, law(n)) for op in ("ReLU6", "Mish") for n in (32, 2048)])
    est = model.estimate(asked)
    assert list(est["method"]) == ["twin", "twin", "family", "family"]
    ratio = (est["estimate"] / asked["seconds"]).to_numpy()
    assert ((0.8 < ratio[:2]) & (ratio[:2] < 1.25)).all(), est  # ReLU's law
    assert ((1.25 < ratio[2:]) & (ratio[2:] < 4)).all(), est  # between ReLU's and GELU's


def _activation(op, n, seconds, cols=64):
    shape = json.dumps([_spec([n, cols])])
    return {"config_id": f"{op}{n}x{cols}", "op_type": op, "mode": "inference", "phase": "forward", "params": "{}",
            "inputs": shape, "outputs": shape, "seconds": seconds}


def test_a_fallbacks_interval_comes_from_its_own_held_out_error_and_is_never_of_zero_width():
    """Each measured op type estimated as if never measured (leave-type-out) gives the fallbacks' held-out errors:
    the activations here cost 1x to 8x one law, so an unmeasured activation estimated from its family's law carries
    an interval as wide as the family's spread, much wider than a measured type's own law. A database too small for
    any held-out error still gives every estimate an interval of non-zero width (a prior factor of 2)."""
    law = lambda n: 2e-6 + n * 64 * 8 / 4e9  # noqa: E731
    costs = {"ReLU": 1, "GELU": 2, "SiLU": 3, "Sigmoid": 4, "Tanh": 5, "ELU": 6, "Hardswish": 7, "Softplus": 8,
             "LeakyReLU": 1.5}
    rows = [_activation(op, n, law(n) * c) for op, c in costs.items() for n in (16, 64, 256, 1024, 4096)]
    data = pd.concat([_synthetic(lambda f, b: 1e-6 + b / 5e9, n=40), pd.DataFrame(rows)], ignore_index=True)
    data["workload"] = [f"m{i % 6}/inference/b1" for i in range(len(data))]
    model = CostModel.fit(data)
    fb = model.fallback
    assert set(fb["op_type"]) >= set(costs) and set(fb["method"]) <= {"twin", "family", "nearest", "global"}
    assert (fb.groupby("op_type")["weight"].sum().round(9) == 1).all()  # each type counts once
    q = model.method_quantiles["family"]
    assert q[0] < -0.5 and q[1] > 0.5  # 1x to 8x: the family law errs by factors, and its interval says so
    far = 8192  # beyond every measured size: no interpolation
    est = model.estimate(pd.DataFrame([_activation("Mish", far, law(far) * 4), _activation("ReLU", far, law(far))]))
    assert est["method"].iloc[0] == "family" and est["method"].iloc[1] in METHODS  # ReLU: its own law
    width = est["high"] / est["low"]
    assert width.iloc[0] > 2 * width.iloc[1] and (est["low"] < est["estimate"]).all()
    assert (est["estimate"] < est["high"]).all()
    # a database of three configurations: no held-out error at all, yet no zero-width interval
    tiny = CostModel.fit(pd.DataFrame([_activation("ReLU", n, law(n)) for n in (16, 256, 4096)]))
    assert not tiny.quantiles and not tiny.method_quantiles
    est = tiny.estimate(pd.DataFrame([_activation("ReLU", 64, law(64)), _activation("Conv1D", 64, law(64))]))
    assert (est["high"] / est["low"] >= 3.9).all()  # a factor of 2 either way
    assert est["low"].lt(est["estimate"]).all() and est["high"].gt(est["estimate"]).all()


def test_an_estimate_never_falls_below_a_smaller_measured_call_of_its_shape_line():
    """A Linear 100 -> 100 measured at 16 and 64 rows, three times slower than the law of the other Linears: the law
    (and its trees) would put 128 rows below the measured 64, and 8 rows above the measured 16. Held between its
    line's measured neighbours, the estimate grows with the rows, whatever the law says."""
    law = lambda f, b: 1e-6 + max(f / 2e10, b / 4e9)  # noqa: E731
    data = _synthetic(law, n=40)

    def lin(rows, seconds=None):
        f = configuration_features("Linear", {"in_features": 100, "out_features": 100}, [_spec([rows, 100])],
                                   [_spec([rows, 100])])
        return {"config_id": f"l{rows}", "op_type": "Linear", "mode": "inference", "phase": "forward",
                "params": json.dumps({"in_features": 100, "out_features": 100}),
                "inputs": json.dumps([_spec([rows, 100])]), "outputs": json.dumps([_spec([rows, 100])]),
                "seconds": seconds if seconds is not None else 3 * law(f["flops"], f["bytes"])}

    measured = pd.DataFrame([lin(16), lin(64)])
    model = CostModel.fit(pd.concat([data, measured], ignore_index=True))
    asked = pd.DataFrame([lin(r) for r in (4, 8, 32, 128, 256)])
    est = model.estimate(asked)["estimate"].to_numpy()
    y16, y64 = measured["seconds"]
    assert est[0] <= est[1] <= y16 <= est[2] <= y64 <= est[3] <= est[4]


def test_a_familys_views_do_not_drag_the_law_its_copies_are_estimated_from():
    """The copy family holds views (a flatten or reshape of a contiguous tensor: no bytes, a call's cost, here
    10 us) and copies (cat at 1 us + bytes / 5 GB/s). An unmeasured type's copy (contiguous of a transposed tensor)
    takes the law of the family's copies, its view (contiguous of a contiguous tensor) the median call of the views:
    a law fitted over both, its floor at most the cheapest call, fitted the views with rates so low that copies came
    out far too slow (a 0.8 MB one of a real database at 4.4 ms, measured 80 us). A type measured only as views
    (reshape here) has a law of its call alone: a copy of it takes the family's law too, not rates that no
    measured call set (a real database had estimated GPT-2's iteration at 43 s from twelve 1.5 MB reshapes)."""
    def row(op, n, seconds, inputs=None):
        x = inputs or [_spec([n, 64])]
        return {"config_id": f"{op}{n}", "op_type": op, "mode": "inference", "phase": "forward", "params": "{}",
                "inputs": json.dumps(x), "outputs": json.dumps([_spec([n, 64])]), "seconds": seconds}

    law = lambda n: 1e-6 + 2 * n * 64 * 4 / 5e9  # noqa: E731  (read and written)
    rows = [row(op, n, 10e-6) for op in ("flatten", "reshape") for n in (8, 32, 128, 512, 2048, 8192)]
    rows += [row("cat", n, law(n), [_spec([n // 2, 64])] * 2) for n in (16, 64, 256, 1024, 4096)]
    model = CostModel.fit(pd.concat([_synthetic(lambda f, b: 1e-6 + b / 5e9, n=20), pd.DataFrame(rows)],
                                    ignore_index=True))
    strided = {"T": [512, 64], "dtype": "float32", "stride": [1, 512]}
    asked = pd.DataFrame([row("contiguous", 512, law(512), [strided]), row("contiguous", 1024, 10e-6),
                          row("reshape", 512, law(512), [strided]), row("reshape", 1024, 10e-6)])
    est = model.estimate(asked)
    assert list(est["method"]) == ["family", "family", "family", "law"]
    assert 0.5 < est["estimate"].iloc[0] / law(512) < 2, est  # the copies' law, not the views'
    assert est["estimate"].iloc[1] == pytest.approx(10e-6)  # the views' call
    assert est["estimate"].iloc[2] == pytest.approx(est["estimate"].iloc[0])  # reshape's copy: the copies' law too
    assert 0.5 < est["estimate"].iloc[3] / 10e-6 < 2, est  # reshape's view: its own law, fitted to its views


def _cli_predict(capsys, *args):
    """`opcost predict ARGS` in this process (torch is imported already): (exit code, stdout, stderr)."""
    from opcost import cli

    code = cli.main(["predict", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_predict_an_unseen_workload_and_a_measured_one(tiny_run, tmp_path, capsys):
    """A batch size the database never saw is estimated (finite, with an interval, estimated_share > 0); a
    measured workload is the sum of its measured costs (estimated_share 0); JSON carries the contract."""
    src = tiny_run / "results" / "db"
    db_dir = tmp_path / "db"
    db_dir.mkdir()
    for f in src.iterdir():
        (db_dir / f.name).write_bytes(f.read_bytes())
    from tests.helpers import TINY

    code, out, err = _cli_predict(capsys, "tiny_dlrm", "--batch", "5", "--db", db_dir, "--config", TINY, "--json")
    assert code == 0, err
    p = json.loads(out)
    assert {"predicted_s", "low_s", "high_s", "estimated_share"} <= set(p)
    assert p["threads"] == 1 and p["batch"] == 5  # numbers, as the config gives them
    assert 0 < p["estimated_share"] <= 1 and math.isfinite(p["predicted_s"])
    assert p["low_s"] < p["predicted_s"] < p["high_s"]  # something is estimated: never an interval of zero width
    from opcost.analysis.training import cache_path

    assert cache_path(db_dir).exists() and not (db_dir / "costmodel.pkl").exists()  # a read leaves the database be
    assert sorted(f.name for f in db_dir.iterdir()) == sorted(f.name for f in src.iterdir())
    db = database.read_db(db_dir)
    # the op type whose estimates widen the interval most: an estimated one of the workload
    five = estimate.predict_workload(db, estimate.workload_layers(
        db, "tiny_dlrm", 5, "inference", yaml.safe_load(TINY.read_text())["models"]["tiny_dlrm"]), db_dir)
    assert p["widest"] == five.widest in set(five.layers.loc[five.layers["method"] != "measured", "op_type"])
    layers = estimate.workload_layers(db, "mlp", 2, "inference")
    full = estimate.predict_workload(db, layers, db_dir)
    assert full.estimated_share == 0 and full.measured_s > 0
    assert full.predicted_s - full.overhead_s == pytest.approx(full.layers["total_s"].sum())
    # a workload the database traced: the overhead of its own trace, so that `opcost predict` answers what its
    # validation's isolated+overhead row holds
    assert full.overhead_from == "own trace"
    assert full.overhead_s == pytest.approx(float(database.of_workload(db["overheads"], "mlp", 2, "inference")
                                                  ["overhead_s"].iloc[0]))
    pred = pd.read_parquet(tiny_run / "results" / "validation" / "predictions.parquet")
    row = pred[(pred["model"] == "mlp") & (pred["source"] == "isolated+overhead")].iloc[0]
    assert full.predicted_s == pytest.approx(row["predicted_s"]) and full.measured_s == pytest.approx(row["measured_s"])
    # an unseen batch size of a model traced at another: the median per call of its own traces
    traced = database.of_workload(db["overheads"], "tiny_dlrm", 2, "inference")
    spec = yaml.safe_load(TINY.read_text())["models"]["tiny_dlrm"]
    calls = estimate.workload_layers(db, "tiny_dlrm", 5, "inference", spec)["count"].sum()
    assert p["overhead_from"] == "same model"
    assert p["overhead_s"] == pytest.approx(max(float(traced["overhead_s"].iloc[0] / traced["calls"].iloc[0]), 0)
                                            * calls)
    code, text, err = _cli_predict(capsys, "tiny_dlrm", "--batch", "5", "--db", db_dir, "--config", TINY)
    assert code == 0 and "estimated" in text and "EmbeddingBag" in text, err
    assert "least sure of the estimates:" in text
    # what the estimated part's range rests on: the tiny database's two held-out models
    assert re.search(r"\ninterval: the estimated part within x\d+\.\d\d either way, as the cost model's 2 held-out "
                     r"models' summed estimates\n", text), text


def test_the_interval_of_a_model_never_profiled_rests_on_the_runs_predict_only_models(tiny_run, tmp_path):
    """With two `predict_only` models' errors kept beside the database, a prediction's estimated part spans their
    predictive spread (Student's t with as many degrees of freedom as models) and says so; once the database's
    files change (a rerun, a merge), those rows no longer describe its predictions and the held-out spread answers."""
    import shutil

    from scipy.stats import t

    from opcost import io, tables
    from opcost.analysis import calibration
    from tests.helpers import TINY

    db_dir = tmp_path / "db"
    shutil.copytree(tiny_run / "results" / "db", db_dir)
    one = pd.read_parquet(db_dir / "calibration.parquet")
    assert len(one) == 1  # tiny.yaml's one predict_only model: too few to rest on
    db = database.read_db(db_dir)
    spec = yaml.safe_load(TINY.read_text())["models"]["tiny_dlrm"]
    layers = estimate.workload_layers(db, "tiny_dlrm", 5, "inference", spec)
    held = estimate.predict_workload(db, layers, db_dir)
    assert "held-out models" in held.interval_basis
    # a second model, 20% off the other way: half-width = RMS x t(0.95, 2) x sqrt(1 + 1/2)
    two = pd.concat([one.assign(log_error=0.1), one.assign(model="other", log_error=-0.2)], ignore_index=True)
    io.write_parquet(tables.frame(tables.CALIBRATION, two), db_dir / "calibration.parquet", tables.CALIBRATION)
    half = np.sqrt((0.1 ** 2 + 0.2 ** 2) / 2) * t.ppf(0.95, 2) * np.sqrt(1.5)
    got = calibration.spread(db_dir, one["conditions"].iloc[0], "inference")
    assert got.models == 2 and got.half == pytest.approx(half)
    p = estimate.predict_workload(db, layers, db_dir)
    assert p.predicted_s == pytest.approx(held.predicted_s)  # the centre is the cost model's; the range is not
    assert f"within x{np.exp(half):.2f} either way, as 2 models never profiled" in p.interval_basis
    assert p.low_s < p.predicted_s < p.high_s
    assert p.high_s - p.predicted_s >= 0.99 * (p.estimated_s - p.level_s) * np.expm1(half)
    assert calibration.spread(db_dir, one["conditions"].iloc[0], "training") is None  # another mode: none
    meas = io.read_parquet(db_dir / "measurements.parquet", tables.MEASUREMENTS)  # the database changed since
    io.write_parquet(meas.iloc[:-1], db_dir / "measurements.parquet", tables.MEASUREMENTS)  # they were predicted
    assert calibration.spread(db_dir, one["conditions"].iloc[0], "inference") is None
    db = database.read_db(db_dir)
    assert "held-out models" in estimate.predict_workload(db, layers, db_dir).interval_basis


def test_a_never_traced_decoder_takes_its_glue_from_a_short_trace_of_its_own(tiny_run, tmp_path, capsys):
    """A model the database never traced (a small Llama-shaped decoder) gets its overhead between operators from a
    short trace taken at predict time, and says so; the database's median per call is what --no-trace takes."""
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"models": {"llm": {
        "model": "hf:llama", "seq_len": 16, "kwargs": {"num_hidden_layers": 1, "hidden_size": 32,
                                                       "intermediate_size": 64, "num_attention_heads": 4,
                                                       "num_key_value_heads": 2, "vocab_size": 128}}}}))
    db = tiny_run / "results" / "db"
    args = ["llm", "--batch", "2", "--db", db, "--config", tmp_path / "c.yaml", "--json"]
    code, out, err = _cli_predict(capsys, *args)
    assert code == 0, err
    now = json.loads(out)
    code, out, err = _cli_predict(capsys, *args, "--no-trace")
    borrowed = json.loads(out)
    assert now["overhead_from"] == "trace now" and borrowed["overhead_from"] == "all models"
    assert now["overhead_s"] > 0 and now["overhead_s"] != borrowed["overhead_s"]
    assert now["process"] == "glibc keeping freed memory, 1 thread(s)" and now["plain_gap_of"].startswith("median of")
    code, text, _ = _cli_predict(capsys, *args[:-1])
    assert "(a short trace of its own, taken now)" in text and "costs hold in opcost's measuring process" in text


def test_predict_with_the_tensors_on_a_slower_tier(tiny_run, tmp_path, capsys):
    """`--tier`: each operator's cost scaled by its slowdown on the tier, as the run's whole-model row on that tier
    has it; a configuration without its own slowdown takes its op type's; a tier without placements is refused."""
    from tests.helpers import TINY

    db_dir = tmp_path / "db"
    db_dir.mkdir()
    for f in (tiny_run / "results" / "db").iterdir():
        (db_dir / f.name).write_bytes(f.read_bytes())
    code, out, err = _cli_predict(capsys, "mlp", "--batch", "2", "--db", db_dir, "--tier", "dram_b", "--json")
    assert code == 0, err
    p = json.loads(out)
    placed = pd.read_parquet(tiny_run / "results" / "validation" / "tiers.parquet").set_index("model").loc["mlp"]
    assert p["tier"] == "dram_b" and p["scenario"] == "activations" and p["tier_measured_share"] == 1
    assert p["estimated_share"] == 0
    assert p["predicted_s"] - p["overhead_s"] == pytest.approx(placed["predicted_s"], rel=1e-9)
    assert p["measured_s"] == pytest.approx(placed["measured_s"], rel=1e-9)  # the run on the tier, not the fast one
    fast = json.loads(_cli_predict(capsys, "mlp", "--batch", "2", "--db", db_dir, "--json")[1])
    assert p["tier_slowdown"] == pytest.approx(p["predicted_s"] / fast["predicted_s"], rel=1e-9)
    # a batch size never profiled: estimated, and every slowdown its op type's median on the tier
    code, out, err = _cli_predict(capsys, "mlp", "--batch", "5", "--db", db_dir, "--config", TINY, "--tier", "dram_b",
                                  "--json")
    assert code == 0, err
    p = json.loads(out)
    assert p["tier_measured_share"] == 0 and math.isfinite(p["predicted_s"]) and p["measured_s"] is None
    code, out, err = _cli_predict(capsys, "mlp", "--batch", "2", "--db", db_dir, "--tier", "dram_b", "--scenario",
                                  "weights")
    assert code == 1 and "--scenario weights: no parameters were placed on dram_b" in err  # tiny.yaml: params fixed
    code, out, err = _cli_predict(capsys, "mlp", "--batch", "2", "--db", db_dir, "--tier", "absent")
    assert code == 1 and out == "" and "--tier absent: the database holds no placement measured with tensors on " \
        "absent on these conditions (slower tiers: dram_b)" in err


def test_the_overhead_per_call_comes_from_the_traces_in_the_database(tiny_run):
    """The database's `overheads` rows are the validation's trace-modelled overheads, and an unseen workload's
    overhead per call is their median per call (without them: the end-to-end residuals)."""
    db = database.read_db(tiny_run / "results" / "db")
    ov = db["overheads"]
    pred = pd.read_parquet(tiny_run / "results" / "validation" / "predictions.parquet")
    plus = pred[pred["source"] == "isolated+overhead"].groupby(["model", "batch", "mode"])["overhead_s"].first()
    assert len(ov) == len(plus) > 0
    for r in ov.itertuples():
        assert r.overhead_s == pytest.approx(plus[(r.model, r.batch, r.mode)])
        wl = database.of_workload(db["layers"], r.model, r.batch, r.mode)
        assert r.calls == wl["count"].sum() and r.host and r.threads >= 1
    used, _ = estimate.conditions(db["measurements"])
    inference = ov[ov["mode"] == "inference"]
    per_call, low, high = overhead_sources.overhead_per_call(db, used, "inference", "trimmed_mean")
    assert per_call == pytest.approx(np.median(np.clip(inference["overhead_s"] / inference["calls"], 0, None)))
    assert low <= per_call <= high
    # without them: the end-to-end residual per call of the fully measured workloads, (reference - sum) / calls,
    # which is what the validation's plain isolated rows hold
    residual = overhead_sources.overhead_per_call({**db, "overheads": ov.iloc[0:0]}, used, "inference", "trimmed_mean")
    plain = pred[(pred["source"] == "isolated") & (pred["mode"] == "inference")]
    calls = [database.of_workload(db["layers"], r.model, r.batch, r.mode)["count"].sum() for r in plain.itertuples()]
    gaps = np.clip((plain["measured_s"] - plain["predicted_s"]).to_numpy(dtype=float) / np.array(calls), 0, None)
    assert residual == pytest.approx((np.median(gaps), np.quantile(gaps, 0.1), np.quantile(gaps, 0.9)))


def test_the_interval_holds_the_methods_own_error(tiny_run):
    """Where three or more fully measured workloads have an end-to-end time, the interval spans the 5-95% range of
    how far their predictions (isolated costs + the modelled overhead) are off each end-to-end time their run took
    (every rotation's, the dedicated and interleaved runs': other minutes, the machine's drift between them
    included), so that a fully measured workload's interval is not just its measurements' noise; with fewer, the
    overhead's range alone."""
    db = database.read_db(tiny_run / "results" / "db")
    used, _ = estimate.conditions(db["measurements"])
    per_call = overhead_sources.overhead_per_call(db, used, "inference", DEFAULT_STATISTIC)[0]
    assert overhead_sources.method_error(db, used, "inference", DEFAULT_STATISTIC, per_call) is None  # two workloads
    # two more workloads: the mlp's layers under other names, their end-to-end times 1.3 times and 1/1.4 of their
    # prediction (isolated + the median overhead per call: they are untraced), whatever the tiny run measured
    mlp = database.of_workload(db["layers"], "mlp", 2, "inference")
    e2e = database.of_workload(db["e2e"], "mlp", 2, "inference")
    times = [c for c in e2e.columns if c.endswith("_s") and c != "timed_s"]
    pred = pd.read_parquet(tiny_run / "results" / "validation" / "predictions.parquet")
    plain = pred[(pred["source"] == "isolated") & (pred["mode"] == "inference")]
    traced = pred[(pred["source"] == "isolated+overhead") & (pred["mode"] == "inference")].set_index("model")
    own = plain[plain["model"] == "mlp"].iloc[0]
    copies = (own.predicted_s + per_call * mlp["count"].sum()) / own.measured_s  # e2e scale: predicted exactly
    scales = (copies * 1.3, copies / 1.4)
    more = {"layers": [db["layers"]], "e2e": [db["e2e"]]}
    for name, scale in zip(("mlp_slow", "mlp_fast"), scales):
        more["layers"].append(mlp.assign(model=name))
        more["e2e"].append(e2e.assign(model=name, **{c: e2e[c] * scale for c in times}))
    db4 = {**db, **{k: pd.concat(v, ignore_index=True) for k, v in more.items()}}
    col = STATISTICS[DEFAULT_STATISTIC]
    rel = []
    for r in plain.itertuples():
        calls = database.of_workload(db["layers"], r.model, r.batch, r.mode)["count"].sum()
        own_e2e = database.of_workload(db["e2e"], r.model, r.batch, r.mode)
        every = own_e2e.loc[own_e2e["method"].isin(["rotation", "dedicated", "interleaved"]), col].astype(float)
        assert len(every) >= 2
        # the traced workloads with the overhead of their trace, the two copies (untraced) with the median per call
        rel += [t / traced.loc[r.model, "predicted_s"] - 1 for t in every]
        if r.model == "mlp":
            rel += [scale * t / (r.predicted_s + per_call * calls) - 1 for scale in scales for t in every]
    assert len(rel) >= 8  # four workloads, each timed by its rotations and its dedicated run at least
    off = overhead_sources.method_error(db4, used, "inference", DEFAULT_STATISTIC, per_call)
    assert off == pytest.approx((np.quantile(rel, 0.05), np.quantile(rel, 0.95)))
    full = estimate.predict_workload(db4, mlp)
    assert full.estimated_share == 0
    lo, hi = 1 + min(off[0], 0), 1 + max(off[1], 0)
    # never narrower than the spread of the timings the prediction rests on (a noisy run's own end-to-end times)
    timed = overhead_sources.every_time(db4, used, DEFAULT_STATISTIC)
    floor = overhead_sources.timing_spread(timed, "mlp", "inference")
    if floor is not None:
        lo, hi = min(lo, 1 + floor[0]), max(hi, 1 + floor[1])
    assert full.low_s == pytest.approx(full.predicted_s * lo)
    assert full.high_s == pytest.approx(full.predicted_s * hi)
    assert full.low_s < full.predicted_s < full.high_s


def test_predict_refuses_to_mix_hosts(tiny_run, tmp_path):
    db = database.read_db(tiny_run / "results" / "db")
    other = db["measurements"].assign(host="other-host")
    mixed = {**db, "measurements": pd.concat([db["measurements"], other], ignore_index=True)}
    layers = estimate.workload_layers(mixed, "mlp", 2, "inference")
    with pytest.raises(OpcostError, match="several host values .*choose one with --host"):
        estimate.predict_workload(mixed, layers)
    one = estimate.predict_workload(mixed, layers, host="other-host")
    assert one.conditions["host"] == "other-host" and one.estimated_share == 0


def test_a_never_profiled_workload_is_predicted_from_one_host_of_a_cluster_run():
    """A cluster run's profiling jobs may land on several nodes: the `predict_only` workload takes the costs of the
    node its end-to-end run ran on, else of the node with the most measurements; never a mix."""
    from opcost.analysis.hosts import prediction_host

    meas = pd.DataFrame({"source": "isolated", "status": "ok", "device": "cpu",
                         "host": ["n1", "n2", "n2", "n3"]})
    cfg = {"device": "cpu"}
    assert prediction_host(meas, pd.DataFrame({"host": ["n3"]}), cfg) == "n3"
    assert prediction_host(meas, pd.DataFrame({"host": ["elsewhere"]}), cfg) == "n2"
    assert prediction_host(meas[meas["host"] == "n1"], pd.DataFrame({"host": ["n9"]}), cfg) is None


def test_sweep_suggest_prints_unmeasured_points_as_a_config_fragment(tiny_run, tmp_path, capsys):
    """`opcost sweep suggest` on a real database: the points of the grid it has not measured, least certain first,
    printed as `sweeps:` YAML that a config takes as it is."""
    import yaml

    from opcost import cli
    from opcost import config as cfgmod

    cfg = tmp_path / "my.yaml"
    cfg.write_text(yaml.safe_dump({"models": {"mlp": {"model": "tests.tiny_models:make_mlp", "kwargs": {"width": 16},
                                                      "input_shapes": [[8]]}},
                                   "batch_sizes": [2], "threads": 1,
                                   "sweeps": [{"op": "Linear", "grid": {"features": [4, 12, 24, 96, 384],
                                                                        "rows": [3]}, "depth": 2, "samples": 2}]}))
    assert cli.main(["sweep", "suggest", str(cfg), "--db", str(tiny_run / "results" / "db")]) == 0
    fragment = yaml.safe_load(capsys.readouterr().out)
    (sweep,) = fragment["sweeps"]
    assert sweep["op"] == "Linear" and sweep["depth"] == 2
    assert sweep["points"] == [{"batch": 2, "features": 384, "rows": 3}, {"batch": 2, "features": 96, "rows": 3}]
    names = [n for n in cfgmod.validate({"models": {"x": {}}, "sweeps": fragment["sweeps"]})["models"]
             if n.startswith("sweep-")]
    assert sorted(names) == ["sweep-Linear-f384-r3", "sweep-Linear-f96-r3"]


def test_transformer_attention_and_rmsnorm_features_by_hand():
    """Grouped-query attention: FLOPs at the query's heads, keys' and values' bytes at their fewer heads; a causal
    call computes the query-key pairs its mask keeps (the CPU kernels skip masked blocks); an RMSNorm reads one
    weight vector over the last dimension, a LayerNorm weight and bias over its normalized_shape."""
    q, kv = _spec([2, 8, 128, 64]), _spec([2, 2, 128, 64])
    gqa = {"args": [q, kv, kv, None, 0.0, False], "kwargs": {"D": {"enable_gqa": True}}}
    full = configuration_features("scaled_dot_product_attention", gqa, [q, kv, kv], [q])
    assert full["flops"] == 4 * 2 * 8 * 128 * 128 * 64
    assert full["bytes"] == (2 * 2 * 8 * 128 * 64 + 2 * 2 * 2 * 128 * 64) * 4  # q and out; k and v at 2 heads
    causal = configuration_features("scaled_dot_product_attention", {**gqa, "args": [q, kv, kv, None, 0.0, True]},
                                    [q, kv, kv], [q])
    assert causal["flops"] == 4 * 2 * 8 * (128 * 129 // 2) * 64 and causal["bytes"] == full["bytes"]
    by_keyword = configuration_features("scaled_dot_product_attention", {"kwargs": {"D": {"is_causal": True}}},
                                        [q, kv, kv], [q])
    assert by_keyword["flops"] == causal["flops"]
    # a training call dispatches the CPU flash kernel, its is_causal the 5th argument
    flash = configuration_features("_scaled_dot_product_flash_attention_for_cpu", {"args": [q, kv, kv, 0.0, True]},
                                   [q, kv, kv], [q])
    assert flash["flops"] == causal["flops"]
    # one query over 512 keys with is_causal: SDPA aligns the mask at the top left, query 0 sees key 0 alone (why
    # transformers passes is_causal only for more than one query)
    step = configuration_features("scaled_dot_product_attention", {"args": [q, kv, kv, None, 0.0, True]},
                                  [_spec([1, 8, 1, 64]), _spec([1, 2, 512, 64])], [_spec([1, 8, 1, 64])])
    assert step["flops"] == 4 * 8 * 1 * 64
    x = [_spec([2, 128, 256])]
    for op in ("LlamaRMSNorm", "Qwen2RMSNorm"):
        assert configuration_features(op, {"param_dtype": ["float32"]}, x, x)["param_bytes"] == 256 * 4
    ln = {"normalized_shape": [256], "elementwise_affine": True, "bias": True}
    assert configuration_features("LayerNorm", ln, x, x)["param_bytes"] == 2 * 256 * 4
    assert configuration_features("LayerNorm", {"eps": 1e-6}, x, x)["param_bytes"] == 2 * 256 * 4  # timm's
    bn = configuration_features("BatchNorm2d", {"num_features": 16}, [_spec([2, 16, 8, 8])], [_spec([2, 16, 8, 8])])
    assert bn["param_bytes"] == 2 * 16 * 4


def test_transformer_module_classes_take_the_sweeps_measured_types_as_twins():
    """Every model's RMSNorm and rotary-embedding class (named after the model) is one twin group with the sweep's
    (a generic rule on the class name, torch's fused RMSNorm apart); transformers' SiLU and erf GELU classes are
    twins of torch's, GPT-2's Python tanh GELU of the sweep's, its Conv1D of Linear."""
    from opcost.analysis import optypes

    for op in ("LlamaRMSNorm", "Qwen2RMSNorm", "MistralRMSNorm", "GemmaRMSNorm", "T5LayerNorm"):
        assert "SweepRMSNorm" in optypes.twins(op) and optypes.work(op) == "norm", op
    assert optypes.twins("RMSNorm") == () and optypes.lookup("RMSNorm").work == "norm"
    for op in ("LlamaRotaryEmbedding", "Qwen2RotaryEmbedding", "MistralRotaryEmbedding"):
        assert optypes.twins(op) == ("SweepRotaryEmbedding",), op
    assert optypes.lookup("RotaryEmbedding").family is None  # the suffix alone names no class of the table
    assert "SiLU" in optypes.twins("SiLUActivation") and "GELU" in optypes.twins("GELUActivation")
    assert "TanhGELU" in optypes.twins("NewGELUActivation") and "Linear" in optypes.twins("Conv1D")
    assert "scaled_dot_product_attention" in optypes.twins("_scaled_dot_product_flash_attention_for_cpu")
    # the glue a decoder's forward runs around its layers (positions, its mask check): families of their kind
    assert (optypes.family("arange"), optypes.family("sum"), optypes.work("is_nonzero")) == \
        ("allocation", "reduction", "view")

    def norm(op, rows, seconds):
        shape = json.dumps([_spec([rows, 256])])
        return {"config_id": f"{op}{rows}", "op_type": op, "mode": "inference", "phase": "forward",
                "params": json.dumps({"param_dtype": ["float32"]}), "inputs": shape, "outputs": shape,
                "seconds": seconds}

    law = lambda rows: 3e-6 + rows * 256 * 8 * 5 / 4e9  # noqa: E731  (five passes over the tensor, 4 GB/s)
    rows = [norm("SweepRMSNorm", n, law(n)) for n in (16, 64, 256, 1024, 4096)]
    rows += [{**norm("LayerNorm", n, law(n) / 4), "params": json.dumps({"normalized_shape": [256], "bias": True})}
             for n in (16, 64, 256, 1024, 4096)]  # the family's other member, four times cheaper
    model = CostModel.fit(pd.concat([_synthetic(lambda f, b: 1e-6 + b / 5e9, n=20), pd.DataFrame(rows)],
                                    ignore_index=True))
    asked = pd.DataFrame([norm(op, n, law(n)) for op in ("Qwen2RMSNorm", "MistralRMSNorm") for n in (32, 2048)])
    est = model.estimate(asked)
    assert list(est["method"]) == ["twin"] * 4
    ratio = (est["estimate"] / asked["seconds"]).to_numpy()
    assert ((0.8 < ratio) & (ratio < 1.25)).all(), est  # the sweep's RMSNorm law, not LayerNorm's


def test_a_sweep_points_cost_is_translated_into_its_cost_inside_a_model(tiny_run):
    """The profiled workloads' configurations are timed in model order and then alone (a rotation of their own, as a
    sweep point's chain times its operator) in one job; per op type, the cold roofline of what a call costs more in
    model order is added to a plain sweep point's time before the cost model is fitted, and to nothing else's; the
    fitted cost model keeps what the calls of a type cost more per iteration."""
    from opcost.analysis import in_model
    from opcost.analysis.training import load_or_fit, training_data
    from opcost.measure.alone import IN_ORDER, SOURCE
    from opcost.model.sweep_points import PREFIX
    from opcost.model.workload import workload_keys

    db = database.read_db(tiny_run / "results" / "db")
    meas, col = db["measurements"], STATISTICS[DEFAULT_STATISTIC]
    used, _ = estimate.conditions(meas)
    rows = estimate.alone_rows(meas, used)
    profiled = db["configs"][~db["configs"]["workload"].str.startswith(PREFIX)]
    alone, in_order = rows[rows["source"] == SOURCE], rows[rows["source"] == IN_ORDER]
    assert set(alone["config_id"]) == set(in_order["config_id"]) <= set(profiled["config_id"])
    assert len(alone) and set(alone["config_id"]) & set(used["config_id"])
    table = in_model.fit(rows, db["layers"], col)
    linear = [k for k in table.per_call if k[:2] == ("type", "Linear")]
    assert linear and ("type", "Linear", *linear[0][2:]) in table.per_iteration
    _, _, mode, phase = linear[0]
    per = [r[(r["op_type"] == "Linear") & (r["mode"] == mode) & (r["phase"] == phase)].groupby("config_id")[col]
           .median() for r in (alone, in_order)]
    both = pd.concat(per, axis=1, join="inner")  # a configuration once, however many workloads
    desc = db["layers"].drop_duplicates("config_id").set_index("config_id").loc[both.index].assign(phase=phase)
    moved_bytes = features(desc)[in_model.FETCHED].to_numpy()  # the weights: fetched again in model order
    lay = db["layers"][db["layers"]["op_type"] == "Linear"].assign(workload=lambda x: workload_keys(x))
    calls = lay["workload"].map(lay.groupby("workload")["count"].sum())  # the type's calls in the workload
    shared = (calls > 1).groupby(lay["config_id"]).max().reindex(both.index).to_numpy()
    assert shared.any() and table.per_call[linear[0]] == in_model.ColdExtra.fit(
        both.iloc[:, 0], moved_bytes, both.iloc[:, 1], shared)
    plain = training_data(db["layers"], used, col, db["configs"])
    moved = training_data(db["layers"], used, col, db["configs"], rows)
    swept = plain["workload"].str.startswith(PREFIX).to_numpy()
    added = (moved["seconds"] - plain["seconds"]).to_numpy()
    assert swept.any() and np.allclose(added[~swept], 0.0)  # a model's own configurations as measured
    same = ((plain["op_type"] == "Linear") & (plain["mode"] == mode) & (plain["phase"] == phase)).to_numpy()
    at = plain[swept & same]
    assert np.allclose(added[swept & same], [table.per_call[linear[0]].of(t, b) for t, b in zip(
        at["seconds"], features(at)[in_model.FETCHED])])
    energy = training_data(db["layers"], used.assign(energy_j=1.0), "energy_j", db["configs"], rows)
    assert np.allclose(energy["seconds"], 1.0)  # energy is left as measured
    fitted = load_or_fit(None, "k", db["layers"], used, col, db["configs"], rows)
    assert fitted.in_model == table


def test_a_types_extra_falls_back_to_its_familys_then_to_every_types_and_only_plain_sweep_points_take_it():
    from opcost.analysis.in_model import ColdExtra, InModel
    from opcost.analysis.training import in_model_extras

    cold = lambda bw: ColdExtra(bw, 1.0)  # noqa: E731
    keys = [("type", "Conv2d", "inference", "forward"), ("family", "activation", "inference", "forward"),
            ("all", None, "inference", "forward")]
    table = InModel(dict(zip(keys, (cold(1e9), cold(1e10), cold(1e11)))), dict(zip(keys, (9e-6, 5e-6, 2e-6))))
    assert table.extra_of("Conv2d", "convolution", "inference", "forward", 1e-6, 1e4) == pytest.approx(9e-6)
    assert table.extra_of("GELU", "activation", "decode64", "forward", 0.0, 1e4) == pytest.approx(1e-6)  # inference
    assert table.extra_of("LayerNorm", "normalisation", "inference", "forward", 0.0, 1e4) == pytest.approx(1e-7)
    assert table.extra_of("Conv2d", "convolution", "inference", "forward", 1e-4, 1e4) == 0.0  # its time covers it
    assert table.extra_of("LayerNorm", "normalisation", "training", "backward", 0.0, 1e4) == 0.0  # none: as is
    assert table.iteration_of("GELU", "activation", "decode64", "forward") == pytest.approx(5e-6)
    assert table.iteration_of("LayerNorm", "normalisation", "training", "backward") == 0.0
    rows = pd.DataFrame([_conv(16, 14, 1, 1e-9)] * 4).assign(
        workload=["sweep-Conv2d-c16/inference/b1", "sweep-Conv2d-c16-block/inference/b1",
                  "sweep-Conv2d-c16-block-evict/inference/b1", "resnet18/inference/b1"])
    nbytes = features(rows.iloc[:1])["param_bytes"].iloc[0]
    assert nbytes / 1e9 > 1e-9 and in_model_extras(rows, table) == pytest.approx([nbytes / 1e9 - 1e-9, 0.0, 0.0, 0.0])


def test_a_types_cost_per_iteration_is_shared_by_its_calls_the_smallest_of_a_models_batches():
    """A global average pool called once per iteration costs about as much more in model order as seventeen
    squeeze-and-excitation pools together (its code fetched again once per iteration, whoever calls it): per type,
    each model's smallest total over its workloads, the median over models; a workload's calls of the type share it,
    and only its estimated rows take it (a measured row was timed in model order already)."""
    from opcost.analysis.in_model import InModel, per_iteration

    both = pd.DataFrame({"source": ["resnet", "resnet", "effnet", "convnext"],
                         "workload": ["resnet/inference/b1", "resnet/inference/b8", "effnet/inference/b1",
                                      "convnext/inference/b1"],
                         "op_type": "AdaptiveAvgPool2d", "family": "pooling", "mode": "inference", "phase": "forward",
                         "rest": [48e-6, 97e-6, 17 * 3.5e-6, 43e-6]})
    got = per_iteration(both)
    assert got[("type", "AdaptiveAvgPool2d", "inference", "forward")] == pytest.approx(48e-6)  # of 48, 59.5, 43
    assert got[("family", "pooling", "inference", "forward")] == pytest.approx(48e-6)
    assert per_iteration(both.assign(rest=-1e-6))[("all", None, "inference", "forward")] == 0.0  # never below 0
    table = InModel({}, got)
    rows = pd.DataFrame({"op_type": ["AdaptiveAvgPool2d", "AdaptiveAvgPool2d", "Conv2d"], "mode": "inference",
                         "phase": "forward", "count": [12, 4, 30], "cost_s": [5e-6, 5e-6, 1e-4]})
    share = estimate.per_iteration_share(rows, table)
    assert share == pytest.approx([48e-6 / 16, 48e-6 / 16, 48e-6 / 30])  # Conv2d: every type's
    assert estimate.per_iteration_share(rows, None) == pytest.approx([0.0] * 3)
    # a small model's calls of a type cost at most their own time more together: 16 pools of 1 us, 16 us
    tiny = estimate.per_iteration_share(rows.assign(cost_s=[1e-6, 1e-6, 1e-4]), table)
    assert tiny == pytest.approx([16e-6 / 16, 16e-6 / 16, 48e-6 / 30])


def test_a_calls_extra_is_the_cold_roofline_of_its_weights():
    """Calls that fetch their weights again in model order (a classifier's after the convolutions) pay what their
    bytes take at the far bandwidth beyond their time alone; a call whose time alone covers that pays a ratio of its
    time alone, the median of what the calls of types called more than once per iteration show (one called once may
    pay its type's cost per iteration, shared by its calls instead)."""
    from opcost.analysis.in_model import ColdExtra

    alone = np.array([5e-6, 8e-6, 20e-6, 30e-6, 45e-6, 110e-6, 120e-6, 300e-6])
    nbytes = np.array([1e4, 7e4, 2.05e6, 2e5, 2.07e6, 9e5, 9.2e5, 1.2e6])
    truth = ColdExtra(1.2e10, 1.0)
    model = alone + [truth.of(a, b) for a, b in zip(alone, nbytes)]
    cold = ColdExtra.fit(alone, nbytes, model)
    assert cold.bandwidth == pytest.approx(1.2e10, rel=0.05)
    assert cold.of(2e-4, 1e6) == 0.0  # a compute-bound call: nothing per call, not a ratio
    assert cold.of(20e-6, 2.05e6) == pytest.approx(2.05e6 / 1.2e10 - 20e-6, rel=0.05)
    assert cold.of(0.0, 1e12) == pytest.approx(cold.top) and cold.top == pytest.approx((model - alone).max())
    assert cold.ratio == 0.0  # no call of a type the workload calls more than once: no ratio
    slower = model + 0.07 * alone  # every call 7% slower in model order beyond its weights (a convolution's)
    many = np.array([True] * 6 + [False] * 2)
    both = ColdExtra.fit(alone, nbytes, slower, many)
    assert both.ratio == pytest.approx(0.07, abs=0.01) and both.of(2e-4, 1e6) == pytest.approx(0.07 * 2e-4, rel=0.15)
    assert ColdExtra.fit(alone, nbytes, slower, np.arange(8) < 2).ratio == 0.0  # too few such calls: none


def _conv(channels, size, batch, seconds, order=""):
    """A depthwise 3x3 convolution's row; ``order``: "" (NCHW), "tokens" (a transformer's one-sample batch of tokens
    viewed as an image: neither order to PyTorch) or "nhwc" (input and weights channels last)."""
    shape = [batch, channels, size, size]
    spec = _spec(shape)
    if order == "tokens":
        spec["stride"] = [channels, 1, size * channels, channels]
    elif order == "nhwc":
        spec["stride"] = [size * size * channels, 1, size * channels, channels]
    params = {"in_channels": channels, "out_channels": channels, "kernel_size": [3, 3], "stride": [1, 1],
              "groups": channels, "bias": True, **({"weight_format": "channels_last"} if order == "nhwc" else {})}
    return {"config_id": f"c{channels}-{size}-{batch}-{order}", "op_type": "Conv2d", "mode": "inference",
            "phase": "forward", "params": json.dumps(params), "inputs": json.dumps([spec]),
            "outputs": json.dumps([spec]), "seconds": seconds}


def test_a_convolution_on_a_token_major_input_has_a_law_of_its_own_and_else_the_plain_ones():
    """PyTorch picks a convolution's kernels by the order it reads from the input's strides: a one-sample batch of a
    transformer's tokens viewed as an image ([1, N, C] transposed) is neither order to it and is copied to NCHW
    first (PVT-v2's depthwise convolutions: several times the plain time on a CPU); the same view of a larger batch,
    and a model in channels-last order, take the channels-last kernels. Measured, a layout has its own law; never
    measured, it takes the plain layout's law, labelled a twin."""
    from opcost.analysis.features import image_format, layout

    tokens = {"T": [1, 32, 56, 56], "stride": [32, 1, 1792, 32]}  # [1, 3136, 32] transposed and viewed
    batch = {"T": [2, 32, 56, 56], "stride": [100352, 1, 1792, 32]}  # [2, 3136, 32] transposed and viewed
    assert image_format(tokens) == "strided" and image_format(batch) == "nhwc"
    assert image_format(_spec([1, 32, 56, 56])) == "nchw"
    assert image_format({"T": [1, 32, 1, 1], "stride": [32, 1, 1, 1]}) == "nchw"  # one pixel, made contiguous
    assert image_format({"T": [1, 32, 1, 1], "stride": [32, 1, 32, 32]}) == "nhwc"  # ... made channels last
    assert layout({}, [tokens]) == "strided" and layout({}, [batch]) == "nhwc"
    assert layout({"weight_format": "channels_last"}, [_spec([1, 32, 8, 8])]) == "nhwc"
    assert layout({}, [_spec([1, 3])]) == ""
    law = lambda c, s, b: 5e-6 + b * c * s * s * 8 / 4e9  # noqa: E731
    sizes = [(c, s, b) for c in (32, 128, 512) for s in (14, 28, 56) for b in (1, 4)]
    plain = [_conv(c, s, b, law(c, s, b)) for c, s, b in sizes]
    slow = [_conv(c, s, b, 3 * law(c, s, b), "tokens") for c, s, b in sizes[::3]]
    asked = pd.DataFrame([_conv(96, 40, 2, 0, "tokens"), _conv(96, 40, 2, 0)])
    both = CostModel.fit(pd.DataFrame(plain + slow)).estimate(asked)
    assert not set(both["method"]) & {"twin", "family", "nearest", "global"}  # each layout's own law
    ratio = both["estimate"].iloc[0] / both["estimate"].iloc[1]
    assert 2.4 < ratio < 3.6, both  # its own law, not the plain one's
    alone = CostModel.fit(pd.DataFrame(plain)).estimate(asked)
    assert alone["method"].iloc[0] == "twin" and alone["method"].iloc[1] != "twin"
    assert alone["estimate"].iloc[0] == pytest.approx(alone["estimate"].iloc[1])
