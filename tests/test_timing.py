"""Statistics on synthetic samples with known answers; the adaptive stop on scripted (deterministic) clocks."""
import itertools
from dataclasses import replace

import numpy as np
import pytest

from opcost.measure.rotation import Rotation, measure_rotation
from opcost.measure.timing import (
    FUTILITY_ROUNDS,
    Measurement,
    RotationError,
    TimingSettings,
    measure,
    median_ci,
    trimmed_mean,
)


def test_median_ci_order_statistics():
    s = np.arange(1, 101, dtype=float)  # n=100: 95% CI of the median spans ranks 40..60 (0-based 40, 59)
    lo, hi = median_ci(s)
    assert (lo, hi) == (41.0, 60.0)
    assert median_ci(np.array([5.0])) == (5.0, 5.0)


def test_trimmed_mean_drops_3_sigma_outlier():
    s = np.array([1.0] * 20 + [1.1] * 20 + [100.0])
    assert trimmed_mean(s) == pytest.approx(1.05)
    assert np.mean(s) > 3


def test_measurement_statistics_and_noise_flag():
    m = Measurement(np.array([1.0, 2.0, 3.0, 4.0, 5.0]), calls_per_sample=1, wall_s=0.0)
    assert m.median == 3.0 and m.iqr == 2.0 and m.noisy
    quiet = Measurement(np.full(50, 2.0), 1, 0.0)
    assert quiet.rel_ci == 0.0 and not quiet.noisy


class ScriptedClock:
    """Returns scripted per-call durations instead of timing: the noise is deterministic."""

    def __init__(self, per_call):
        self.per_call = iter(per_call)

    def time_block(self, fn, calls):
        return sum(next(self.per_call) for _ in range(calls))


def test_adaptive_stop_reaches_target_on_stable_operator():
    clock = ScriptedClock(itertools.cycle([1e-3, 1.001e-3, 0.999e-3]))
    s = TimingSettings(target_rel_ci=0.01, min_samples=10, max_samples=1000, warmup_s=0, warmup_calls=2)
    m = measure(lambda: None, s, clock=clock)
    assert m.n == 10  # the first block already meets the target
    assert m.rel_ci <= 0.01 and m.median == pytest.approx(1e-3, rel=1e-3)


def test_adaptive_stop_hits_cap_on_noisy_operator():
    rng = np.random.default_rng(0)
    clock = ScriptedClock(rng.choice([1e-3, 3e-3], size=100000))
    s = TimingSettings(target_rel_ci=0.01, min_samples=10, max_samples=200, warmup_s=0, warmup_calls=2,
                       max_seconds=60)
    m = measure(lambda: None, s, clock=clock)
    assert m.n == 200  # stopped by the cap, not by the target
    assert m.rel_ci > 0.01 and m.noisy


def test_a_second_visit_completes_the_first():
    s = TimingSettings(target_rel_ci=0.01, min_samples=10, max_samples=1000, warmup_s=0, warmup_calls=2,
                       max_seconds=60, min_sample_s=0)
    spread = list(np.random.default_rng(0).permutation(np.linspace(0.9e-3, 1.1e-3, 101)))  # +-10%, uniform
    alone = measure(lambda: None, s, clock=ScriptedClock(itertools.cycle(spread)))
    assert alone.n > 10 and alone.precise
    prior = Measurement(np.tile(spread, 8), 1, 1.0, s)  # 808 earlier samples: precise
    second = measure(lambda: None, s, clock=ScriptedClock(itertools.cycle(spread)), prior=prior)
    assert second.n == 10 and not second.precise and prior.pooled(second).precise
    assert prior.pooled(second).n == 818
    longer = replace(s, min_sample_s=5e-3)  # alone: samples of 5 calls; completing a visit: of as many as it took
    assert measure(lambda: None, longer, clock=ScriptedClock(itertools.cycle(spread))).calls_per_sample == 5
    assert measure(lambda: None, longer, clock=ScriptedClock(itertools.cycle(spread)),
                   prior=prior).calls_per_sample == 1
    third = measure(lambda: None, longer, clock=ScriptedClock(itertools.cycle(spread)), calls=3)
    assert third.calls_per_sample == 3
    with pytest.raises(ValueError, match="do not pool"):
        prior.pooled(third)


class PerCallableClock:
    """Scripted per-call durations for each callable of a rotation (the callable returns its name); records the
    order of the calls."""

    def __init__(self, scripts: dict):
        self.scripts = {k: iter(v) for k, v in scripts.items()}
        self.calls: list[str] = []

    def time_block(self, fn, calls):
        assert calls == 1
        name = fn()
        self.calls.append(name)
        return next(self.scripts[name])


ROT = TimingSettings(target_rel_ci=0.01, min_samples=10, max_samples=60, warmup_s=0, warmup_calls=1, block=10,
                     max_seconds=60)


def test_rotation_calls_each_callable_once_per_round_in_shuffled_orders():
    events = []
    clock = PerCallableClock({k: itertools.repeat(1e-3) for k in "abc"})
    fns = [lambda k=k: events.append(k) or k for k in "abc"]
    prepare = [lambda k=k: events.append("prep-" + k) for k in "abc"]
    ms = measure_rotation(Rotation(fns, prepare), ROT, clock=clock, seed=1)
    rounds = [clock.calls[i:i + 3] for i in range(0, len(clock.calls), 3)]
    assert all(sorted(r) == ["a", "b", "c"] for r in rounds)  # once per round
    assert len({tuple(r) for r in rounds}) > 1  # the order changes between rounds
    assert all(events[i] == "prep-" + events[i + 1] for i in range(0, len(events), 2))  # prepare just before
    assert [m.n for m in ms] == [10, 10, 10] and len(rounds) == 11  # 1 warm-up round, then one block: precise
    assert all(m.calls_per_sample == 1 and m.median == 1e-3 and not m.noisy for m in ms)


def test_rotation_follows_a_call_sequence_with_repeats():
    clock = PerCallableClock({k: itertools.repeat(t) for k, t in zip("abc", (1e-3, 2e-3, 3e-3))})
    seq = [0, 1, 1, 2, 1]  # b called three times per round, twice in a row, as a model may call it
    a, b, c = measure_rotation(Rotation([lambda k=k: k for k in "abc"], sequence=seq), ROT, clock=clock)
    assert clock.calls[:10] == list("abbcb" * 2)  # every round exactly the sequence
    assert a.n == c.n == 10 and b.n == 30  # the stop rule counts rounds; each call is one sample
    assert (a.median, b.median, c.median) == (1e-3, 2e-3, 3e-3)
    with pytest.raises(ValueError, match="every callable"):
        measure_rotation(Rotation([lambda: "a", lambda: "b"], sequence=[0, 0]), ROT, clock=clock)


class Output:
    """A callable's output that reports when it is freed."""

    def __init__(self, name, freed):
        self.name, self.freed = name, freed

    def __del__(self):
        self.freed.append(self.name)


class FreeLog:
    """A rotation clock that logs, per call, the call's output name and the Outputs freed in the call's timed
    free (its output when not kept, the drops, and fed outputs no later call reads); raises if anything is freed
    outside a timed region."""

    def __init__(self, freed, log):
        self.freed, self.log, self.mark = freed, log, 0

    def time_call(self, fn):
        assert not self.log or len(self.freed) == self.mark, "freed outside the timed regions"
        out = fn()
        self.log.append((out.name, []))
        return 1e-3, out

    def time_free(self, dead):
        before = len(self.freed)
        dead.clear()
        self.log[-1][1].extend(sorted(self.freed[before:]))
        self.mark = len(self.freed)
        return 1e-4


def test_rotation_keeps_outputs_alive_until_their_release_call_drops_them():
    freed, log = [], []

    fns = [lambda k=k: Output(k, freed) for k in "abcd"]
    # a's output lives until d's call (as a residual), b's until c's, c's and d's die at once
    measure_rotation(Rotation(fns, sequence=[0, 1, 2, 3], release=[3, 2, 2, 3]), ROT, clock=FreeLog(freed, log))
    assert log[:8] == [("a", []), ("b", []), ("c", ["b", "c"]), ("d", ["a", "d"])] * 2  # frees sorted by name
    with pytest.raises(ValueError, match="release"):
        measure_rotation(Rotation(fns, release=[0, 1, 2, 3]), ROT, clock=FreeLog(freed, log))


def test_rotation_feeds_each_call_the_outputs_its_producers_made_in_the_same_round():
    freed, log, slot = [], [], {}
    made = iter(range(10**6))

    def produce(k):
        return Output(f"{k}{next(made)}", freed)

    def consume():  # reads whatever is bound in its slot
        return Output("c<" + ",".join(o.name for o in slot.get("in", [])), freed)

    def bind(outputs):
        slot["in"] = [o for o in outputs if o is not None]
        return slot.clear  # the call's argument references go away right after it

    fns = [lambda: produce("a"), lambda: produce("b"), consume]
    # c reads a's and b's outputs; the model drops a's right after b (release 1) and b's at c (release 2);
    # a feeder's output is kept for its reader even so, and freed right after the reader's call, with its arguments
    ms = measure_rotation(Rotation(fns, sequence=[0, 1, 2], release=[1, 2, 2], feed=[None, None, (bind, [0, 1])]),
                          ROT, clock=FreeLog(freed, log))
    assert all(m.n == 10 for m in ms)
    first = log[:3]
    assert first[0] == ("a0", []) and first[1] == ("b1", [])
    assert first[2] == ("c<a0,b1", ["a0", "b1", "c<a0,b1"])  # read this round's outputs; all freed after it
    assert log[3:6] == [("a2", []), ("b3", []), ("c<a2,b3", ["a2", "b3", "c<a2,b3"])]
    with pytest.raises(ValueError, match="does not run before"):
        measure_rotation(Rotation(fns, sequence=[0, 1, 2], release=[1, 2, 2], feed=[(bind, [2]), None, None]),
                         ROT, clock=FreeLog(freed, log))
    with pytest.raises(ValueError, match="feed needs a release"):
        measure_rotation(Rotation(fns, sequence=[0, 1, 2], feed=[None, None, None]), ROT, clock=FreeLog(freed, log))


def test_rotation_calls_a_sparse_member_every_nth_round_only():
    clock = PerCallableClock({k: itertools.repeat(t) for k, t in zip("abm", (1e-3, 2e-3, 5e-3))})
    a, b, m = measure_rotation(Rotation([lambda k=k: k for k in "abm"], sequence=[0, 1, 2], every=[1, 1, 3]), ROT,
                               clock=clock, targets=[0, 1])
    # warm-up round 0 (with m), then rounds 1..10: m closes rounds 3, 6, 9
    assert "".join(clock.calls) == "abm" + "ab" * 2 + ("abm" + "ab" * 2) * 2 + "abm" + "ab"
    assert a.n == b.n == 10 and m.n == 3 and m.median == 5e-3


def test_a_reference_iterations_lead_in_lasts_about_five_milliseconds():
    """lead_in: the iteration itself when one call outlasts the lead-in, else a callable that calls it as often as
    lasts LEAD_S, at most MAX_LEAD times."""
    import time

    from opcost.measure.rotation import LEAD_S, MAX_LEAD, lead_in

    calls = []

    def quick():
        calls.append(1)

    def slow():
        time.sleep(2 * LEAD_S)

    assert lead_in(slow) is slow
    lead = lead_in(quick)
    assert lead is not quick and len(calls) == 2  # timed once, after a call of its own
    lead()
    assert len(calls) == 2 + MAX_LEAD  # a sub-µs call: capped
    calls.clear()
    lead_in(quick, lead_s=1e-12)()
    assert len(calls) == 2 + 1


def test_rotation_stops_at_the_cap_and_flags_the_imprecise_callable():
    rng = np.random.default_rng(0)
    short = replace(ROT, max_samples=FUTILITY_ROUNDS - 10)  # the cap comes before any judgement of futility
    clock = PerCallableClock({"stable": itertools.repeat(2e-3), "noisy": iter(rng.choice([1e-3, 3e-3], 1000))})
    stable, noisy = measure_rotation(Rotation([lambda: "stable", lambda: "noisy"]), short, clock=clock)
    assert stable.n == noisy.n == short.max_samples  # one imprecise member keeps the whole rotation going
    assert not stable.noisy and noisy.noisy and noisy.rel_ci > ROT.target_rel_ci
    # only the members named as targets decide when to stop
    clock = PerCallableClock({"stable": itertools.repeat(2e-3), "noisy": iter(rng.choice([1e-3, 3e-3], 1000))})
    stable, noisy = measure_rotation(Rotation([lambda: "stable", lambda: "noisy"]), ROT, clock=clock, targets=[0])
    assert stable.n == noisy.n == 10


def test_rotation_gives_up_on_a_median_the_caps_leave_no_rounds_to_make_precise():
    long = replace(ROT, max_samples=1000)
    rng = np.random.default_rng(0)

    def run(names):
        scripts = {"stable": itertools.repeat(2e-3),
                   "bimodal": iter(rng.choice([1e-3, 3e-3], 5000)),  # median CI stays ~100% wide: hopeless
                   "uniform": iter(rng.uniform(0.9e-3, 1.1e-3, 5000))}  # ~3% at 50 rounds, 1% at ~400
        return measure_rotation(Rotation([lambda k=k: k for k in names]), long, clock=PerCallableClock(
            {k: scripts[k] for k in names}))

    stable, bimodal = run(["stable", "bimodal"])
    assert stable.n == bimodal.n == FUTILITY_ROUNDS  # not 1000: the bimodal median cannot narrow to 1% in them
    assert stable.precise and bimodal.noisy
    stable, uniform, bimodal = run(["stable", "uniform", "bimodal"])
    assert FUTILITY_ROUNDS < uniform.n < long.max_samples  # the uniform one could, and was given the rounds
    assert uniform.precise and uniform.rel_ci <= long.target_rel_ci and bimodal.noisy
    # a narrowing median gets no rounds the caps cannot pay for: 60 in all cannot make 3% into 1%
    _, uniform = measure_rotation(Rotation([lambda k=k: k for k in ("stable", "uniform")]),
                                  replace(ROT, max_samples=60),
                                  clock=PerCallableClock({"stable": itertools.repeat(2e-3),
                                                          "uniform": iter(rng.uniform(0.9e-3, 1.1e-3, 500))}))
    assert uniform.n == FUTILITY_ROUNDS and not uniform.precise


def test_rotation_time_cap_counts_the_measured_callables_not_the_context():
    import time

    delays = itertools.cycle([0.003, 0.001])

    def noisy():
        time.sleep(next(delays))

    s = replace(ROT, max_seconds=0.05, max_samples=1000, warmup_calls=1)
    ms = measure_rotation(Rotation([noisy] + [lambda: time.sleep(0.001)] * 4), s, targets=[0])
    # warm-up and one block of 10 rounds (each >= 5 ms) spend the 0.05 s of the one target; 5 x 0.05 s would
    # allow about 4 blocks more
    assert ms[0].n == s.block and not ms[0].precise


def test_precision_floor_for_submicrosecond_callables():
    tiny = Measurement(np.array([1e-8, 3e-8] * 20), 1, 0.0, ROT, rotation=True)
    assert tiny.rel_ci > ROT.target_rel_ci and tiny.precise and not tiny.noisy  # CI half-width 10 ns < 200 ns
    loose = Measurement(np.array([1e-3, 3e-3] * 20), 1, 0.0, ROT, rotation=True)
    assert not loose.precise and loose.noisy


def test_rotation_names_the_failing_callable():
    def boom():
        raise ValueError("bad shape")

    with pytest.raises(RotationError) as e:
        measure_rotation(Rotation([lambda: None, boom]), ROT)
    assert e.value.index == 1 and "bad shape" in str(e.value)


def test_real_clock_times_a_real_callable():
    import time

    s = TimingSettings(target_rel_ci=0.05, max_seconds=1.0, warmup_s=0.0, min_sample_s=0.002)
    m = measure(lambda: time.sleep(0.001), s)
    assert 0.0009 < m.median < 0.01 and m.calls_per_sample >= 1 and m.wall_s < 3


def test_noisy_configurations_are_remeasured_and_the_least_noisy_attempt_kept(monkeypatch):
    import pandas as pd

    from opcost.measure import back_to_back
    from opcost.measure import profile as prof
    from opcost.measure.energy import NoMeter, missing

    calls = {"n": 0}

    def fake_measure(row, models, device, settings, energy, *placement_and_pool):
        calls["n"] += 1
        noisy = calls["n"] == 1  # the first attempt of the first configuration is noisy, the rest are clean
        samples = np.array([1.0, 3.0] * 10) if noisy else np.full(20, 2.0)
        return [("default", None, "forward", Measurement(samples * 1e-3, 1, 0.0, settings), missing(NoMeter()))]

    monkeypatch.setattr(back_to_back, "measure_config", fake_measure)
    configs = pd.DataFrame([{"config_id": f"c{i}", "op_type": "x", "mode": "inference", "scope": "functional",
                             "op": "aten.x.default", "params": "{}", "inputs": "[]", "replay": "{}", "models": "[]"}
                            for i in range(3)])
    journal = []
    meas, _ = prof.profile_configs(configs, {}, "cpu", "float32",
                                   prof.ProfileSettings(TimingSettings(), remeasure=2, cache="warm", visits=1),
                                   on_result=lambda rows, samples: journal.extend(rows))
    assert calls["n"] == 4  # 3 configurations + 1 re-measurement of the noisy one
    assert (~meas["noisy"]).all() and sorted(meas["attempts"]) == [1, 1, 2]
    assert sorted(r["config_id"] for r in journal) == ["c0", "c1", "c2"]  # each journaled once, when final


def test_two_measurements_agree_within_twice_the_precision_target():
    s = TimingSettings(target_rel_ci=0.02, abs_ci_s=2e-7)

    def at(ms: float) -> Measurement:
        return Measurement(np.full(20, ms * 1e-3), 1, 0.0, s)

    assert at(2.0).agrees(at(2.07)) and at(2.07).agrees(at(2.0))  # 3.4% apart: each within 2% of 2.035
    assert not at(2.0).agrees(at(2.1))  # 4.9% apart
    assert not at(21e-3).agrees(at(30e-3))  # a slow visit: 21 vs 30 us
    assert at(1e-3).agrees(at(1.3e-3))  # 1.0 vs 1.3 us: 30% apart, but within twice the 0.2 us floor


def _scripted_visits(monkeypatch, script: dict):
    """profile_configs' back-to-back passes over configurations whose visits return the scripted medians (ms,
    tight samples): returns (measurements, visits made per configuration)."""
    import pandas as pd

    from opcost.measure import back_to_back
    from opcost.measure import profile as prof
    from opcost.measure.energy import NoMeter, missing

    made = {cid: 0 for cid in script}

    def fake_measure(row, models, device, settings, energy, *placement_and_pool):
        cid = row["config_id"]
        ms = script[cid][made[cid]]
        made[cid] += 1
        samples = ms * 1e-3 * (1 + 0.001 * np.sin(np.arange(20)))
        return [("default", None, "forward", Measurement(samples, 1, 0.0, settings), missing(NoMeter()))]

    monkeypatch.setattr(back_to_back, "measure_config", fake_measure)
    configs = pd.DataFrame([{"config_id": cid, "op_type": "x", "mode": "inference", "scope": "functional",
                             "op": "aten.x.default", "params": "{}", "inputs": "[]", "replay": "{}", "models": "[]"}
                            for cid in script])
    meas, _ = prof.profile_configs(configs, {}, "cpu", "float32",
                                   prof.ProfileSettings(TimingSettings(), remeasure=1, cache="warm", visits=2))
    return meas.set_index("config_id"), made


def test_visits_go_on_until_two_agree_and_a_slow_visit_is_not_kept(monkeypatch):
    meas, made = _scripted_visits(monkeypatch, {"steady": [2.0, 2.01], "slow_first": [3.0, 2.0, 2.02],
                                                "slow_second": [2.0, 2.9, 2.01]})
    assert made == {"steady": 2, "slow_first": 3, "slow_second": 3}  # a third pass for the two that disagreed
    assert meas["attempts"].to_dict() == made
    assert (meas["median_s"] < 2.05e-3).all() and (meas["median_s"] > 1.95e-3).all()
    assert (meas["n"] == 40).all()  # the agreeing pair's samples, kept together
    assert not meas["noisy"].any()


def test_visits_that_never_agree_keep_the_lower_median(monkeypatch):
    meas, made = _scripted_visits(monkeypatch, {"drifting": [3.0, 2.0, 2.5]})
    assert made == {"drifting": 3}  # visits + remeasure passes at most
    assert abs(meas.loc["drifting", "median_s"] - 2.0e-3) < 1e-5


def test_a_sweep_points_two_rotation_visits_pool_where_they_agree_and_keep_the_lower_where_not():
    """The second visit of a group of sweep points: agreeing visits pool their samples; a visit the machine ran slow
    for whole (tight samples, 2.6x the other: a vCPU lent elsewhere) is not kept, nor a noisy one."""
    from opcost.measure.profiling import ProfileSettings
    from opcost.measure.rotation_engine import merge_visits, revisited

    s = TimingSettings(target_rel_ci=0.02, abs_ci_s=2e-7)

    def at(us: float, spread: float = 0.0) -> Measurement:
        return Measurement(us * 1e-6 * (1 + spread * np.linspace(-1, 1, 40)), 1, 0.0, s, rotation=True)

    key = ("default", "forward")
    first = {"a": {key: (None, at(200.0), {})}, "b": {key: (None, at(531.0), {})}, "c": {key: (None, at(50.0), {})},
             "d": {key: (None, at(10.0, 0.9), {})}}
    second = {"a": {key: (None, at(202.0), {})}, "b": {key: (None, at(201.0), {})}, "c": {key: (None, at(90.0), {})},
              "d": {key: (None, at(12.0), {})}}
    merged = {cid: r[key][1] for cid, r in merge_visits(first, second).items()}
    assert merged["a"].n == 80 and 200e-6 < merged["a"].median < 202e-6
    assert merged["b"].n == 40 and merged["b"].median == pytest.approx(201e-6)
    assert merged["c"].median == pytest.approx(50e-6)
    assert first["d"][key][1].noisy and merged["d"].median == pytest.approx(12e-6)
    sweep = [{"workload": "sweep-Conv2d-c64-k3-h14/inference/b1"}, {"workload": "sweep-Linear-f8-r3/inference/b1"}]
    assert revisited(sweep, ProfileSettings()) and not revisited(sweep, ProfileSettings(visits=1))
    assert not revisited(sweep + [{"workload": "resnet18/inference/b1"}], ProfileSettings())
