"""The run's time left (opcost.progress): estimated from the durations of the rules' jobs, printed on Snakemake's
progress events, and printed by a real run."""
import io
import json
import logging
import re
import statistics

import pytest

from opcost.progress import (PRIOR_JOBS, PRIOR_PER_MODEL_S, PRIOR_S, PRIOR_SPEED_S, Eta, ProgressHandler, clock,
                             load_history, priors)


def test_clock():
    assert clock(40.4) == "40 s"
    assert clock(370) == "6 min 10 s"
    assert clock(7500) == "2 h 05 min"


def test_time_left_counts_each_job_at_its_rules_mean():
    eta = Eta(history={"figures": [30.0, 50.0]})
    eta.finished("profile", 100.0)
    eta.finished("extract", 10.0)
    eta.finished("extract", 20.0)
    # two profile jobs (100 s each), one extract (15 s), figures from the earlier runs (40 s), validate unknown:
    # this run's mean job (130 s / 3)
    assert eta.left(5, ["profile", "profile", "extract", "figures", "validate"]) == 200 + 15 + 40 + 130 / 3
    assert eta.left(3) == 3 * 130 / 3  # no rules known: this run's mean
    assert Eta(parallel=4).left(3) is None  # nothing finished yet: no estimate
    two = Eta(parallel=2)
    two.finished("profile", 100.0)
    assert two.left(2, ["profile", "profile"]) == 100.0


def test_a_rule_not_run_yet_takes_its_prior_at_this_hosts_speed():
    """The long rules that come last (the never-profiled models' predictions) are not a run's mean job: where neither
    this run nor an earlier one ran a rule, its prior counts, scaled by how fast this host ran the rules it did
    against theirs; `unseen` per model it predicts."""
    prior = priors({"predict_only": {"a": {}, "b": {}, "c": {}}})
    assert prior["unseen"] == 3 * PRIOR_PER_MODEL_S["unseen"] and prior["profile"] == PRIOR_S["profile"]
    eta = Eta(prior=prior)
    eta.finished("extract", 60.0)  # the first job also started the warm process: one rule alone scales nothing
    assert eta.left(1, ["unseen"]) == prior["unseen"]
    eta.finished("e2e", 2 * PRIOR_S["e2e"])
    # the jobs' time over their priors', each with PRIOR_SPEED_S at the priors' speed
    speed = (60.0 + 2 * PRIOR_S["e2e"] + PRIOR_SPEED_S) / (PRIOR_S["extract"] + PRIOR_S["e2e"] + PRIOR_SPEED_S)
    assert 1.0 < speed < (60.0 + 2 * PRIOR_S["e2e"]) / (PRIOR_S["extract"] + PRIOR_S["e2e"])
    assert eta.left(2, ["unseen", "evaluate"]) == pytest.approx(speed * (prior["unseen"] + PRIOR_S["evaluate"]))
    assert eta.left(1, ["validate"]) == pytest.approx(statistics.fmean([60.0, 16.2]))  # no prior: the run's mean
    # Snakemake's job graph still holds the job that just finished when it reports progress: one rule too many
    assert eta.left(1, ["evaluate", "unseen"]) == pytest.approx(speed * (prior["unseen"] + PRIOR_S["evaluate"]) / 2)
    # a rule run once: its job with PRIOR_JOBS jobs at its prior, at this host's speed
    assert eta.left(1, ["e2e"]) == pytest.approx((2 * PRIOR_S["e2e"] + PRIOR_JOBS * speed * PRIOR_S["e2e"])
                                                 / (1 + PRIOR_JOBS))


def test_history_keeps_each_rules_latest_durations(tmp_path):
    eta = Eta(history={"profile": [1.0] * 19})
    for t in (2.0, 3.0):
        eta.finished("profile", t)
    kept = eta.kept()["profile"]
    assert len(kept) == 20 and kept[-2:] == [2.0, 3.0]
    path = tmp_path / "times.json"
    path.write_text(json.dumps(eta.kept()))
    assert load_history(path) == eta.kept()
    path.write_text("not json")
    assert load_history(path) == {}
    assert load_history(tmp_path / "none.json") == {}


def _record(**fields):
    record = logging.LogRecord("snakemake.logging", logging.INFO, __file__, 1, None, None, None)
    record.__dict__.update(fields)
    return record


def test_handler_times_jobs_from_snakemakes_events_and_prints_the_time_left(tmp_path):
    now = [0.0]
    out = io.StringIO()
    pending = ["profile", "evaluate"]
    handler = ProgressHandler(Eta(), lambda: list(pending), out=out, path=tmp_path / "times.json",
                              now=lambda: now[0])
    handler.emit(_record(event="job_info", jobid=3, rule_name="profile"))
    now[0] = 90.0
    handler.emit(_record(event="job_finished", job_id=3))
    handler.emit(_record(event="progress", done=1, total=3))
    line = out.getvalue().strip()
    # the evaluate job has no duration yet: it counts at this run's mean job (90 s)
    assert line == "opcost: 1 of 3 jobs done in 1 min 30 s; about 3 min 00 s left (more if the coverage loop goes on)"
    assert json.loads((tmp_path / "times.json").read_text()) == {"profile": [90.0]}
    pending.clear()
    handler.emit(_record(event="progress", done=3, total=3))  # nothing left: nothing printed
    handler.emit(_record(event="progress"))  # a malformed event never takes the run down
    assert out.getvalue().strip() == line


def test_a_run_prints_its_time_left(tiny_run):
    out = (tiny_run / "snakemake.out").read_text()
    lines = re.findall(r"^opcost: (\d+) of (\d+) jobs done in .+; about .+ left.*$", out, re.M)
    assert lines, "no time left printed"
    assert all(int(done) < int(total) for done, total in lines)
    assert (tiny_run / ".snakemake" / "opcost-times.json").exists()
