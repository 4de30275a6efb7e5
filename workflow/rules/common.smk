import atexit
import json
import os
import sys
import time
from pathlib import Path

from opcost import host_check, preflight, repair, rerun
from opcost.config import generate_questions, stage_settings, validate as validate_config, workloads
from opcost.yaml_keys import duplicate_keys
from opcost.errors import OpcostError
from opcost.journal import FOLDER, RunMark, job_of, run_marked, unfinished
from opcost.progress import watch as watch_progress

if workflow.is_main_process:  # the user's command line, repeated by every repair command the run prints
    rerun.remember(sys.argv[1:])
def _problems_error(lines):
    """The WorkflowError that names a config's problems, one line each."""
    return WorkflowError("\n".join(f"opcost: {line}" for line in lines))


def _duplicate_keys():
    """Keys written twice in one of the run's config files, which YAML reads as the last one alone."""
    found = []
    for path in rerun.current().get("configfiles") or []:
        try:
            found += duplicate_keys(Path(path).read_text(encoding="utf-8"), path)
        except (OSError, UnicodeDecodeError):  # Snakemake has read it already: nothing more to say here
            pass
    return found


PREFLIGHT = None  # what is wrong with the models (opcost.preflight), found while Snakemake builds its DAG
try:
    if workflow.is_main_process and (TWICE := _duplicate_keys()):
        raise _problems_error(TWICE)
    validate_config(config)  # JSON schema, defaults filled in; one line naming each bad key
    if workflow.is_main_process:
        PREFLIGHT = preflight.start(config, cache_dir=".snakemake/opcost-preflight")
        for line in host_check.tier_warnings(config):  # the run goes on: each said once, before it starts
            print(f"opcost: warning: {line}", file=sys.stderr)
except OpcostError as e:
    raise _problems_error(str(e).splitlines()) from None


def preflight_checked():
    """Wait for the check the parse started; its problems, one line each, stop the run before the first job
    (``onstart``). A command that runs no job (a dry run) reports them as it exits, with a failing status."""
    global PREFLIGHT
    pending, PREFLIGHT = PREFLIGHT, None
    if pending is not None and pending.problems():
        raise _problems_error(pending.problems())


def _preflight_at_exit():
    try:
        preflight_checked()
    except WorkflowError as e:
        sys.stdout.flush()
        print(str(e), file=sys.stderr, flush=True)
        os._exit(1)


atexit.register(_preflight_at_exit)

STARTED = time.time()
WORKLOADS = workloads(config)
SWEEP_POINTS = workloads(config, "sweeps")  # profiled only (opcost.model.sweeps): not validation workloads
UNSEEN = workloads(config, "predict_only")  # timed end to end and predicted from the database, never profiled
GENERATE = generate_questions(config)  # Hugging Face generate() predicted from the database and timed (config `generate`)
CHUNKS = list(range(config["profile"]["chunks"]))
ENV = "../../envs/opcost.yaml"
# A measuring job takes all of the `measure` resource (profiles/default: measure=100), every other job 1: a measuring
# job never runs beside another job, measuring or not, whatever --cores allows. Each rule declares its share (a
# default-resources entry would be evaluated per job, a tenth of a large dry run's time).
MEASURE_ALONE = 100
MEASURE_SHARED = 1


wildcard_constraints:
    model="[^/]+",
    mode="inference|training|decode[1-9][0-9]*|prefill[1-9][0-9]*",
    batch="[0-9]+",
    chunk="[0-9]+",
    n="[0-9]+",
    tier="[^/.]+",


def get_tier_check(wildcards=None):
    """With placement.on_missing: strict, every measuring job waits for the tier check, so that a tier this host
    lacks stops the run before anything is measured."""
    return ["results/placement/tiers.json"] if config["placement"]["on_missing"] == "strict" else []


def settings_of(stage, rule=None):
    """Params function: the config slice that shapes ``stage``'s output (opcost.config.stage_settings), so that a
    changed key reruns exactly the jobs it affects, and the run mark of the job of ``rule`` (default: the stage's
    name), so that a plain rerun redoes a job whose last run failed or was stopped (opcost.journal.RunMark)."""

    def params(wildcards):
        key = (stage, wildcards.get("model"))
        if key not in SETTINGS:  # the config does not change during a run: each slice is made once
            SETTINGS[key] = stage_settings(config, *key)
        return SETTINGS[key]

    return run_marked(params, rule or stage)


SETTINGS = {}  # (stage, model or None) -> its params (settings_of)


def run_mark(rule):
    """Params function of the jobs of ``rule``, whose outputs no config key shapes: the run mark alone."""
    return run_marked(lambda wildcards: "", rule)


def _locked():
    """Whether another Snakemake run holds this directory (its lock files): its jobs in flight look unfinished, and
    Snakemake itself refuses this run with the lock's own message."""
    return any(Path(".snakemake/locks").glob("*.lock"))


if workflow.is_main_process and not _locked() and (UNFINISHED := unfinished()):
    print(f"opcost: the last run of {len(UNFINISHED)} job(s) did not complete ({', '.join(UNFINISHED[:3])}"
          f"{', ...' if len(UNFINISHED) > 3 else ''}): they are redone", file=sys.stderr)


if workflow.is_main_process and not _locked() and repair.record_lost():
    print("opcost: warning: results/ holds an earlier run's tables but Snakemake's record of the jobs that made them "
          "(.snakemake/metadata) is gone: a changed config or a deleted result cannot be seen, and they may be "
          f"stale; to measure afresh: {rerun.forceall_command()}", file=sys.stderr)


def per_workload(template, workloads=None):
    """``template`` (with {model}, {mode}, {batch}) filled in for every configured workload (of ``workloads``)."""
    return [template.format(model=m, mode=mode, batch=b) for m, mode, b in (WORKLOADS if workloads is None
                                                                             else workloads)]


def get_unseen(kind):
    """Input function: the predict-only workloads' `layers` or `e2e` tables."""
    template = {"layers": "results/layers/{model}/{mode}_b{batch}.parquet",
                "e2e": "results/e2e/{model}/{mode}_b{batch}.parquet"}[kind]

    def inputs(wildcards=None):
        return per_workload(template, UNSEEN)

    return inputs


def get_layer_tables(wildcards=None):
    return per_workload("results/layers/{model}/{mode}_b{batch}.parquet")


def get_sweep_layers(wildcards=None):
    """The sweep points' operator configurations (one table), when the config has sweeps."""
    return ["results/sweeps/layers.parquet"] if SWEEP_POINTS else []


def get_e2e_tables(wildcards=None):
    return per_workload("results/e2e/{model}/{mode}_b{batch}.parquet")


# The slower NUMA tiers a whole model is timed on (CPU runs; a tier this host lacks gives an empty table)
SLOW_NUMA_TIERS = [name for name, spec in list((config["placement"].get("tiers") or {}).items())[1:]
                   if "numa" in spec] if config["device"] == "cpu" else []


def get_tier_e2e_tables(wildcards=None):
    return [p for tier in SLOW_NUMA_TIERS
            for p in per_workload("results/e2e/{model}/{mode}_b{batch}.on_%s.parquet" % tier)]


def get_previous_evaluation(wildcards):
    """The evaluation that chose iteration n's operator types, as an input whose time does not count (`ancient`): what
    the profiling job takes from it is its params (:func:`added_op_types`), so an evaluation rewritten with the same
    choice (a changed `loop.target`, a deleted evaluation file) re-measures nothing, and another choice reruns it."""
    n = int(wildcards.n)
    return [ancient(f"results/loop/iter{n - 1}/evaluation.json")] if n > 0 else []


def added_op_types(wildcards):
    """The operator types iteration n adds, as the previous evaluation chose them (none listed for the first: the
    config's `loop.initial_op_types`, in the profiling job's settings)."""
    n = int(wildcards.n)
    if n == 0:
        return []
    with checkpoints.evaluate.get(n=n - 1).output[0].open() as f:
        return json.load(f)["next_op_types"]


def profile_chunks_upto(n, template="results/profile/iter{n}_chunk{chunk}.parquet"):
    """One output of every profiling job of loop iterations 0..n (default: its measurements)."""
    return [template.format(n=i, chunk=c) for i in range(n + 1) for c in CHUNKS]


PROFILE_E2E = "results/profile/iter{n}_e2e_{chunk}.parquet"  # the model iterations timed in its rotations


def get_evaluate_inputs(wildcards):
    n = int(wildcards.n)
    inputs = {
        "configs": "results/db/configs.parquet",
        "layers": get_layer_tables(),
        "e2e": get_e2e_tables(),
        "insitu": get_insitu_tables(),
        "profiles": profile_chunks_upto(n),
        "profile_e2e": profile_chunks_upto(n, PROFILE_E2E),
        "overheads": get_trace_tables("overheads")(),
        "op_types": get_trace_tables("op_types")(),
    }
    if n > 0:
        inputs["previous"] = f"results/loop/iter{n - 1}/evaluation.json"
    return inputs


def final_iteration():
    """The loop's last iteration: walks the evaluate checkpoints until one says it is done."""
    n = 0
    while True:
        with checkpoints.evaluate.get(n=n).output[0].open() as f:
            if json.load(f)["done"]:
                return n
        n += 1


def get_all_evaluations(wildcards=None):
    return [f"results/loop/iter{i}/evaluation.json" for i in range(final_iteration() + 1)]


def get_profile_chunks(wildcards=None):
    return profile_chunks_upto(final_iteration())


def get_profile_e2e(wildcards=None):
    return profile_chunks_upto(final_iteration(), PROFILE_E2E)


def get_insitu_tables(wildcards=None):
    return per_workload("results/insitu/{model}/{mode}_b{batch}.parquet")


def get_alone_tables(wildcards=None):
    return per_workload("results/alone/{model}/{mode}_b{batch}.parquet")


def get_insitu_e2e_tables(wildcards=None):
    return per_workload("results/insitu/{model}/{mode}_b{batch}.e2e.parquet")


def get_trace_tables(part):
    """Input function: one trace analysis table (`op_types`, `overheads`, ...) per workload."""

    def inputs(wildcards=None):
        return per_workload(f"results/trace/{{model}}/{{mode}}_b{{batch}}.{part}.parquet")

    return inputs


FAILING_STAGES = ["extract", "e2e", "alone", "insitu", "trace"]  # per-workload stages that record failures


def get_failure_tables(wildcards=None):
    """Every per-workload stage's failure table (coplace's when enabled)."""
    stages = FAILING_STAGES + (["coplace"] if config["placement"]["simultaneous"] else [])
    sweeps = ["results/failures/extract/sweeps.parquet"] if SWEEP_POINTS else []
    unseen = [p for s in ("extract", "e2e") for p in
              per_workload(f"results/failures/{s}/{{model}}/{{mode}}_b{{batch}}.parquet", UNSEEN)]
    tiers = [p for tier in SLOW_NUMA_TIERS
             for p in per_workload("results/failures/e2e/{model}/{mode}_b{batch}.on_%s.parquet" % tier)]
    return [p for s in stages for p in per_workload(f"results/failures/{s}/{{model}}/{{mode}}_b{{batch}}.parquet")] + sweeps + unseen + tiers


def get_coplace(kind):
    """Input function: simultaneous placement profiling outputs (`table` or `summary`), when enabled."""

    def inputs(wildcards=None):
        if not config["placement"]["simultaneous"]:
            return []
        ext = "parquet" if kind == "table" else "summary.json"
        return per_workload(f"results/coplace/{{model}}/{{mode}}_b{{batch}}.{ext}")

    return inputs


def print_summary(summary, failures):
    """The run's summary (results/summary.txt, failures included) when this run wrote it, else its failures: the
    last lines a user sees."""
    if Path(summary).exists() and Path(summary).stat().st_mtime >= STARTED:
        print(Path(summary).read_text(), file=sys.stderr)  # after Snakemake's own log lines, which go to stderr
    else:
        print_failures(failures)


def print_failures(path):
    """The run's failures (results/failures.tsv), when this run wrote it: the last lines a user sees."""
    if Path(path).exists() and Path(path).stat().st_mtime >= STARTED:
        from opcost.failures import read_tsv, text

        failures = read_tsv(path)
        print(f"opcost: {text(failures)}" + (f"\n(all of them: {path})" if len(failures) else ""),
              file=sys.stderr)  # after Snakemake's own log lines, which go to stderr


def repair_results():
    """Renew the run mark of each job whose result file an earlier run made and that is missing or damaged now
    (opcost.repair): Snakemake redoes those jobs and what is made from their outputs, and a dry run shows them. A
    command that only shows or lists changes nothing."""
    run = rerun.current()
    if not workflow.is_main_process or (run.get("dryrun") and not run.get("plain_dryrun")) or _locked():
        return  # another run holds the directory: its files in the making are not this run's to repair
    marks = {r: RunMark(FOLDER, job_of(r.rule, r.wildcards)) for r in repair.find(workflow.rules)}
    found = [r for r, mark in marks.items() if not mark.unfinished()]  # an unfinished job is redone anyway
    for r in found:
        marks[r].renew(persist=not run.get("dryrun"))
    named = [r for r in found if r.wildcard_dict.get("model", "") in ("", *config["models"])]  # configured
    if named:
        print(f"opcost: {repair.describe(named)}: "
              + ("a run without -n rebuilds them and what is made from them" if run.get("dryrun")
                 else "rebuilding them and what is made from them"), file=sys.stderr)
