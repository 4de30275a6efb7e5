"""Training costs add up: isolated forward and backward of a model whose costs are known by construction."""
import pytest

from opcost.analysis.predict import costed_layers, predict
from opcost.config import validate
from opcost.database import catalog
from opcost.measure.e2e import measure_e2e
from opcost.measure.engine import (
    ENGINE_OP_TYPE,
    engine_call_s,
    engine_cost,
    needs_engine,
    without_engine_calls,
)
from opcost.measure.profile import ProfileSettings, profile_configs
from opcost.measure.timing import TimingSettings
from opcost.model.extract import extract
from opcost.model.sources import load_model
from opcost.model.workload import make_workload
from opcost.report import figures

LAYERS, FORWARD_MS, BACKWARD_MS = 3, 2.0, 2.0  # each well above the ~0.1 ms Python cost of a call
MODELS = {"timed": {"model": "tests.tiny_models:make_timed", "input_shapes": [[8]],
                    "kwargs": {"layers": LAYERS, "forward_ms": FORWARD_MS, "backward_ms": BACKWARD_MS}}}
SHORT = TimingSettings(max_seconds=1.0, warmup_s=0.01, min_samples=20)  # medians of 20+ single calls


@pytest.mark.timing
def test_a_known_backward_cost_is_measured_and_the_iteration_adds_up(tmp_path):
    cfg = validate({"models": MODELS, "threads": 1})
    wl = make_workload(load_model("timed", cfg["models"]["timed"]), 4, "training")
    layers = extract(wl)
    configs = catalog(layers)
    timed = configs[configs["op_type"] == "Timed"]
    assert len(timed) == 1 and int(layers.loc[layers["op_type"] == "Timed", "count"].sum()) == LAYERS

    meas, samples = profile_configs(configs, cfg["models"], "cpu", "float32", ProfileSettings(SHORT, cache="fresh"))
    assert not needs_engine(meas)  # the rotation measured the engine and took it out of every backward row
    engine_s = engine_cost(meas)
    assert 0 < engine_s < 1e-3  # tens of microseconds on a CPU
    rows = meas[meas["config_id"].isin(timed["config_id"])].set_index("phase")
    assert rows.loc["forward", "median_s"] == pytest.approx(FORWARD_MS / 1e3, rel=0.15)
    # within 15%, as the forward (a `timing` test: `make test` runs it alone on the machine)
    assert rows.loc["backward", "median_s"] == pytest.approx(BACKWARD_MS / 1e3, rel=0.15)
    assert 0 < rows.loc["backward", "engine_s"] < 1e-3 and rows["engine_s"].isna().sum() == 1

    costed = costed_layers(layers, meas, "cpu")
    engine = costed[costed["op_type"] == ENGINE_OP_TYPE]
    assert len(engine) == 1 and engine["count"].iloc[0] == 1 and engine["cost_s"].iloc[0] == engine_s

    e2e, _ = measure_e2e(wl, TimingSettings(max_seconds=1.0, warmup_s=0.05, min_samples=10), "cpu")
    measured = float(e2e["trimmed_mean_s"].iloc[0])
    assert measured == pytest.approx(LAYERS * (FORWARD_MS + BACKWARD_MS) / 1e3, rel=0.2)  # the construction holds
    pred = predict(layers, meas, e2e, "cpu", sources=("isolated",)).set_index("source")
    assert pred.loc["isolated", "reference"] == "dedicated"
    assert abs(pred.loc["isolated", "error"]) < 0.1, pred.loc["isolated"].to_dict()

    # the breakdown figure splits each op type into its forward and (hatched) backward part
    forward, backward = figures.breakdown_fractions(costed, pred.reset_index())
    row = ("timed", "training", 4)
    assert forward.loc[[row], "Timed"].iloc[0] == pytest.approx(LAYERS * FORWARD_MS / 1e3 / measured, rel=0.2)
    assert backward.loc[[row], "Timed"].iloc[0] == pytest.approx(LAYERS * BACKWARD_MS / 1e3 / measured, rel=0.2)
    assert backward.loc[[row], ENGINE_OP_TYPE].iloc[0] == pytest.approx(engine_s / measured)
    assert forward.loc[[row], ENGINE_OP_TYPE].iloc[0] == pytest.approx(0.0, abs=1e-12)
    figures.breakdown(costed, pred.reset_index(), tmp_path / "breakdown.png")
    assert (tmp_path / "breakdown.png").stat().st_size > 0


def test_rows_measured_outside_a_rotation_take_the_engine_measured_alone():
    cfg = validate({"models": MODELS, "threads": 1})
    configs = catalog(extract(make_workload(load_model("timed", cfg["models"]["timed"]), 4, "training")))
    timed = configs[configs["op_type"] == "Timed"]
    # back-to-back calls (cache warm): no rotation, so no engine measured with the rows
    meas, samples = profile_configs(timed, cfg["models"], "cpu", "float32", ProfileSettings(SHORT, cache="warm"))
    assert needs_engine(meas)
    engine_s = engine_call_s("cpu", SHORT, pairs=3, warmup_s=0.2)
    net, net_samples = without_engine_calls(meas, samples, engine_s)
    back = (meas["phase"] == "backward").to_numpy()
    assert (net.loc[back, "median_s"] == (meas.loc[back, "median_s"] - engine_s).clip(lower=0)).all()
    assert (net.loc[back, "engine_s"] == engine_s).all() and net.loc[~back, "engine_s"].isna().all()
    assert not needs_engine(net)
    again, _ = without_engine_calls(net, net_samples, engine_s)  # rows already net are left as they are
    assert again["median_s"].equals(net["median_s"])


@pytest.mark.timing
def test_a_training_rotation_measures_the_engine_in_its_own_rounds(monkeypatch):
    """The two engine probes close every round, called in turn; each backward row is taken net of the intercept
    of their medians in that rotation, and forward rows are left as measured."""
    from opcost.measure import rotation
    from opcost.measure.engine import engine_intercept
    from opcost.measure.rotation import ENGINE_PROBE_REPEATS

    cfg = validate({"models": MODELS, "threads": 1})
    configs = catalog(extract(make_workload(load_model("timed", cfg["models"]["timed"]), 4, "training")))
    seen, real = [], rotation.measure_rotation

    def spy(rot, *a, **kw):
        ms = real(rot, *a, **kw)
        seen.append((rot.calls, {"sequence": rot.sequence, "release": rot.release}, ms))
        return ms
    monkeypatch.setattr(rotation, "measure_rotation", spy)
    fast = TimingSettings(max_seconds=0.2, warmup_s=0.0, min_samples=20, max_samples=20, target_rel_ci=1e-9)
    meas, _ = profile_configs(configs, cfg["models"], "cpu", "float32", ProfileSettings(fast, remeasure=0))
    [(fns, kw, ms)] = seen
    n = len(fns) - 2  # the configurations' phases, then the two probes
    probes = [n, n + 1] * ENGINE_PROBE_REPEATS
    assert kw["sequence"][-len(probes):] == probes and n not in kw["sequence"][:-len(probes)]
    start = len(kw["sequence"]) - len(probes)
    assert kw["release"][start:] == list(range(start, len(kw["sequence"])))  # each probe drops its output at once
    engine_s = engine_intercept(ms[n].median, ms[n + 1].median)
    back = meas[(meas["phase"] == "backward") & (meas["status"] == "ok")]
    assert len(back) and (back["engine_s"] == engine_s).all()
    assert meas.loc[meas["phase"] == "forward", "engine_s"].isna().all()
    timed = back[back["op_type"] == "Timed"].iloc[0]
    raw = {m.median for m in ms[:n]}
    assert timed["median_s"] + engine_s == pytest.approx(max(raw), rel=1e-9)  # the Timed backward is the slowest call


def test_a_training_round_runs_the_forward_calls_then_the_backward_calls_in_reverse():
    """As the iteration: its forward pass in call order, then its backward pass in reverse; forward outputs live until
    the forward call where the model drops them, gradients are dropped at once."""
    from opcost.measure.rotation import model_sequence

    members = [("a", "forward"), ("a", "backward"), ("b", "forward"), ("b", "backward"), ("c", "forward")]
    positions = {"a": [0, 2], "b": [1], "c": [3]}
    releases = {"a": [1, 3], "b": [3], "c": [3]}
    sequence, release = model_sequence(members, positions, releases)
    assert sequence == [0, 2, 0, 4, 1, 3, 1]  # a b a c | a b a
    assert release == [1, 3, 3, 3, 4, 5, 6]
    inference = [("a", "forward"), ("b", "forward"), ("c", "forward")]
    assert model_sequence(inference, positions, releases) == ([0, 1, 0, 2], [1, 3, 3, 3])
