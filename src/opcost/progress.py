"""The run's estimated time left, printed as it goes: each time Snakemake reports its progress ("N of M steps
done"), one line ``opcost: N of M jobs done in 3 min 05 s; about 6 min left``.

It listens to the events of Snakemake's logger (the fields its logger-plugin interface documents: ``JOB_INFO`` with
``jobid`` and ``rule_name``, ``JOB_FINISHED`` with ``job_id``, ``PROGRESS`` with ``done`` and ``total``), so it
needs nothing from the jobs themselves. A job's duration is from its ``JOB_INFO`` to its ``JOB_FINISHED``. The time
left is the jobs still to run, each at the mean duration of its rule in this run, else in the runs before it
(:data:`TIMES`, kept per rule), else at its rule's prior (:data:`PRIOR_S`: a default study's job on a 2-core VM,
scaled by how fast this host ran the rules it has run so far against their priors; ``unseen`` per model it
predicts), else at this run's mean job; the jobs run ``parallel`` at a time. The rules of the
jobs still to run come from the workflow's job graph where this Snakemake exposes it; otherwise every job left
counts as this run's mean. A coverage loop that goes on adds jobs the estimate cannot know yet: the line says so
while an evaluation of the loop is still to run."""
from __future__ import annotations

import json
import logging
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

TIMES = Path(".snakemake/opcost-times.json")  # rule -> the durations (s) of its latest jobs, over runs
KEEP = 20  # durations kept per rule
LOOP_RULE = "evaluate"  # the coverage loop's checkpoint: while one is to run, the loop may add jobs
# seconds per job of each rule in the default study (config/config.yaml) from a fresh clone on the 2-core VM
# (benchmarks/records/measurements.md, 2026-12-01): where neither this run nor an earlier one has run a rule, its
# jobs are expected to take this, times this host's speed against it; the rules that come last (`unseen`, a late
# loop iteration's `profile`) are the long ones, which a run's mean job understates
PRIOR_S = {"e2e": 8.1, "profile": 22.0, "alone": 11.7, "trace": 7.7, "insitu": 3.3, "extract": 1.1, "e2e_tier": 2.3,
           "figures": 4.0, "sweeps": 2.0, "evaluate": 0.5}
PRIOR_PER_MODEL_S = {"unseen": 9.0}  # per `predict_only` model the job predicts (81 s for the default's nine)
# how far this run's first jobs move the priors (benchmarks/records/measurements.md, 2026-12-01, "time left"): as
# many jobs at the prior as this in each rule's mean, and this many seconds at the priors' speed in the host's speed
PRIOR_JOBS = 3
PRIOR_SPEED_S = 30.0


def clock(seconds: float) -> str:
    """``2 h 05 min``, ``6 min 10 s``, ``40 s``."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


class Eta:
    """Durations of the jobs by rule, and the estimate of what is left (pure: no Snakemake, no clock)."""

    def __init__(self, history: dict[str, list[float]] | None = None, parallel: int = 1,
                 prior: dict[str, float] | None = None):
        self.history = {rule: list(times) for rule, times in (history or {}).items()}
        self.parallel = max(1, int(parallel))
        self.prior = dict(prior or {})  # rule -> seconds per job expected where nothing measured it (priors())
        self.durations: dict[str, list[float]] = defaultdict(list)

    def finished(self, rule: str, seconds: float) -> None:
        self.durations[rule].append(float(seconds))

    def mean_of(self, rule: str) -> float | None:
        """A job's expected seconds: this run's jobs of the rule, with :data:`PRIOR_JOBS` jobs at its prior (at this
        host's speed) where it has one, since a rule's first jobs are often its smallest models'; else the earlier
        runs' jobs of the rule; else its prior at this host's speed; None where nothing is known."""
        times = self.durations.get(rule)
        prior = self.prior[rule] * self.speed() if rule in self.prior else None
        if times and prior is not None:
            return (sum(times) + PRIOR_JOBS * prior) / (len(times) + PRIOR_JOBS)
        times = times or self.history.get(rule)
        return statistics.fmean(times) if times else prior

    def speed(self) -> float:
        """This host's job time against the priors: the time of the jobs this run has run whose rules have one, over
        what their priors add up to, each with :data:`PRIOR_SPEED_S` seconds at the priors' own speed (a few short
        jobs, faster than their priors, once took the estimate to half the time left); 1 before two such rules (the
        first job also starts the warm process)."""
        ran = {r: t for r, t in self.durations.items() if t and self.prior.get(r)}
        if len(ran) < 2:
            return 1.0
        return (sum(sum(t) for t in ran.values()) + PRIOR_SPEED_S) / (
            sum(len(t) * self.prior[r] for r, t in ran.items()) + PRIOR_SPEED_S)

    def left(self, remaining: int, rules: list[str] | None = None) -> float | None:
        """Seconds left for ``remaining`` jobs, of the ``rules`` given (one name per job, or about: a list of another
        length counts as their mix) where known. None before any duration is known."""
        done = [t for times in self.durations.values() for t in times]
        overall = statistics.fmean(done) if done else None
        if rules:  # the job graph can still hold the job that just finished: the rules' mix, scaled to `remaining`
            means = [self.mean_of(rule) for rule in rules]
            if all(m is not None for m in means) or overall is not None:
                total = sum(overall if m is None else m for m in means)
                return total * remaining / len(rules) / self.parallel
        return None if overall is None else remaining * overall / self.parallel

    def kept(self) -> dict[str, list[float]]:
        """The history to keep for the next run: each rule's latest :data:`KEEP` durations."""
        merged = {rule: list(times) for rule, times in self.history.items()}
        for rule, times in self.durations.items():
            merged[rule] = (merged.get(rule, []) + times)[-KEEP:]
        return merged


def priors(config: dict | None = None) -> dict[str, float]:
    """:data:`PRIOR_S`, with each per-model prior (:data:`PRIOR_PER_MODEL_S`) times the models ``config`` gives it."""
    models = len((config or {}).get("predict_only") or {})
    return {**PRIOR_S, **{rule: s * models for rule, s in PRIOR_PER_MODEL_S.items() if models}}


def load_history(path=TIMES) -> dict[str, list[float]]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(rule): [float(t) for t in times if isinstance(t, (int, float))]
            for rule, times in data.items() if isinstance(times, list)}


class ProgressHandler(logging.Handler):
    """A handler on Snakemake's logger that prints the time left on each progress event (see the module)."""

    def __init__(self, eta: Eta, pending_rules=None, out=None, path=TIMES, now=time.monotonic):
        super().__init__(level=logging.INFO)
        self.eta, self.pending_rules, self.out, self.path, self.now = eta, pending_rules, out, Path(path), now
        self.started = now()
        self.running: dict[int, tuple[str, float]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._event(str(getattr(record, "event", "")), record)
        except Exception:  # an estimate never takes the run down
            pass

    def _event(self, event: str, record) -> None:
        if event == "job_info" and getattr(record, "jobid", None) is not None:
            self.running[int(record.jobid)] = (str(record.rule_name), self.now())
        elif event == "job_finished" and getattr(record, "job_id", None) is not None:
            rule, start = self.running.pop(int(record.job_id), (None, None))
            if rule is not None:
                self.eta.finished(rule, self.now() - start)
                self._save()
        elif event == "progress":
            self.report(int(record.done), int(record.total))

    def report(self, done: int, total: int) -> None:
        remaining = max(0, total - done)
        if not remaining:
            return
        rules = self._rules_left()
        seconds = self.eta.left(remaining, rules)
        if seconds is None:
            return
        loop = " (more if the coverage loop goes on)" if rules and LOOP_RULE in rules else ""
        print(f"opcost: {done} of {total} jobs done in {clock(self.now() - self.started)}; "
              f"about {clock(seconds)} left{loop}", file=self.out or sys.stderr, flush=True)

    def _rules_left(self) -> list[str] | None:
        if self.pending_rules is None:
            return None
        try:
            return list(self.pending_rules())
        except Exception:  # the job graph changing under us, or a Snakemake without it
            return None

    def _save(self) -> None:
        from opcost.io import write_json  # after a job: pyarrow is not loaded at the Snakefile's parse

        try:
            write_json(self.eta.kept(), self.path)
        except OSError:
            pass


def watch(workflow, logger_name: str = "snakemake.logging") -> ProgressHandler:
    """Attach the estimate to Snakemake's logger (the Snakefile's ``onstart``). ``workflow`` is the Snakefile's
    global: its ``dag`` gives the rules of the jobs still to run. Run locally, the jobs count one after another
    (opcost's measuring jobs run alone on the machine, and they take most of the time); on a cluster, up to its
    ``--jobs`` at once."""
    def pending_rules():
        return [job.rule.name for job in workflow.dag.needrun_jobs()]

    try:
        parallel = 1 if workflow.local_exec else (workflow.nodes or 1)
    except Exception:  # a Snakemake without these
        parallel = 1
    try:
        config = dict(workflow.config)
    except Exception:  # a Snakemake without it
        config = {}
    handler = ProgressHandler(Eta(load_history(), parallel=parallel, prior=priors(config)), pending_rules)
    logging.getLogger(logger_name).addHandler(handler)
    return handler
