"""The command that repeats the user's own Snakemake run with some result files rebuilt, so that a repair the run
prints works as printed: the same Snakefile, directory, config files, config overrides, profiles and targets, plus
``-R FILES``; and the table of which jobs a change of each config key reruns (:func:`rerun_table`).

The workflow's main process reads its command line once (:func:`remember`) and leaves it in the environment, which
the jobs it starts inherit; a job, or a process started some other way, falls back to the default run.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shlex

ENV = "OPCOST_RERUN"
DEFAULT_TARGETS = ("results/figures",)
_SHOWS = ("dryrun", "report", "lint", "unlock", "summary", "detailed_summary", "dag", "rulegraph", "filegraph",
          "d3dag", "list_rules", "list_target_rules", "touch", "cleanup_metadata", "delete_all_output",
          "delete_temp_output", "list_changes", "list_conda_envs", "archive", "generate_unit_tests", "containerize",
          "export_cwl", "print_compilation")
_DEFAULT = {"base": ["snakemake", "--cores", "1"], "targets": list(DEFAULT_TARGETS), "dryrun": False,
            "plain_dryrun": False, "forced": {}, "configfiles": []}


def _option(flag: str, value) -> list[str]:
    if value in (None, [], (), "", False):
        return []
    return [flag, *map(str, value)] if isinstance(value, (list, tuple)) else [flag, str(value)]


def from_argv(argv: list[str]) -> dict:
    """The run's options that shape what it builds and where (``base``) and its ``targets``, from a Snakemake
    command line (without the program name); the default run where it cannot be parsed."""
    try:
        from snakemake.cli import get_argument_parser

        with contextlib.redirect_stderr(io.StringIO()):  # argparse's usage text, were it to fail
            args, _ = get_argument_parser().parse_known_args(list(argv))
    except (Exception, SystemExit):  # not a Snakemake command line: the default run
        return dict(_DEFAULT)
    base = ["snakemake", *_option("--cores", args.cores or 1), *_option("--snakefile", args.snakefile),
            *_option("--directory", args.directory), *_option("--configfile", args.configfile),
            *_option("--config", args.config), *_option("--profile", args.profile),
            *_option("--workflow-profile", args.workflow_profile)]
    # a run that only shows, reports or lists builds nothing: it must change nothing either
    shows = any(getattr(args, a, None) for a in _SHOWS)
    forced = {"all": bool(args.forceall), "targets": bool(args.force),
              "run": [str(f) for f in (args.forcerun or ())]}
    return {"base": base, "targets": [str(t) for t in args.targets] or list(DEFAULT_TARGETS),
            "own_targets": bool(args.targets), "dryrun": shows,
            "plain_dryrun": bool(args.dryrun), "forced": forced,
            "configfiles": [str(f) for f in (args.configfile or ())]}


def forced(rule: str, outputs) -> bool:
    """Whether the user's command forces the job of ``rule`` with ``outputs`` to run again (``-F``, ``-R`` naming
    the rule or one of the outputs, ``-f`` with one of them as target): a measuring job then measures afresh."""
    run = current()
    force = run.get("forced") or {}
    outputs = {os.path.normpath(str(o)) for o in outputs}
    named = {os.path.normpath(f) for f in force.get("run", [])}
    return bool(force.get("all") or rule in force.get("run", []) or outputs & named
                or (force.get("targets") and outputs & {os.path.normpath(t) for t in run["targets"]}))


def remember(argv: list[str]) -> dict:
    """Keep the run's command (:func:`from_argv`) in the environment, for this process and the jobs it starts."""
    run = from_argv(argv)
    os.environ[ENV] = json.dumps(run)
    return run


def current() -> dict:
    """The run remembered by :func:`remember`, else the default run."""
    try:
        run = json.loads(os.environ.get(ENV) or "null")
        return run if isinstance(run, dict) and {"base", "targets"} <= set(run) else dict(_DEFAULT)
    except json.JSONDecodeError:
        return dict(_DEFAULT)


def command(paths) -> str:
    """The shell command that reruns the current run with ``paths`` rebuilt (their jobs and what follows); outside
    a run (the ``opcost`` command), the run's command to be completed with its own options."""
    run = current()
    line = shlex.join([*run["base"], "-R", *map(str, paths), "--", *run["targets"]])
    if os.environ.get(ENV):
        return line
    return f"{line}, with your run's own --configfile and options"


def forceall_command() -> str:
    """The shell command that reruns the current run's every job (``--forceall``)."""
    return shlex.join([*current()["base"], "--forceall", "--", *current()["targets"]])


def report_command(out: str = "report.html") -> str:
    """The shell command that writes the current run's HTML report, of its own targets (the default target's
    report would want the files of targets the run did not make, and fail)."""
    run = current()
    return shlex.join([*run["base"], "--report", out, *(["--", *run["targets"]] if run.get("own_targets") else [])])


RERUN_TABLE = ("<!-- rerun table: generated by opcost.rerun.rerun_table -->", "<!-- end of rerun table -->")


def rerun_table() -> list[str]:
    """Markdown: for each top-level config key (and each single setting a stage declares), the rules whose jobs a
    change of it reruns, from :data:`opcost.config.STAGE_KEYS` (what is made from their outputs reruns after them):
    the table of config/README.md, kept identical by tests/test_docs.py."""
    from opcost.config import _WORKLOAD_CHOICE, PER_WORKLOAD_STAGES, STAGE_KEYS, schema

    rows = []
    for top in schema()["properties"]:
        whole = [st for st, keys in STAGE_KEYS.items() if top in keys]
        if top == "models":
            rows.append(("models.<name>", [f"{st} (that model's)" for st in PER_WORKLOAD_STAGES]
                         + ["e2e (the `predict_only` models' it is the control of: opcost.measure.control)"] + whole))
            continue
        if top == "predict_only":  # a per-workload stage's params hold its own model's entry
            rows.append((top, [f"{st} (that model's)" for st in ("extract", "e2e")] + whole))
            continue
        rows.append((top, whole))
        settings: dict[str, set] = {}  # a setting some stages declare alone -> those stages
        for st, keys in STAGE_KEYS.items():
            for key in keys:
                if key.startswith(top + "."):
                    settings.setdefault(key, set()).add(st)
        rows += [(key, sorted(set(whole) | sts, key=list(STAGE_KEYS).index)) for key, sts in settings.items()]
    def jobs(key, stages):
        said = ", ".join(stages) or "none"
        if key in _WORKLOAD_CHOICE:  # a model entry's own list works alike
            said += ("; a workload added or dropped is jobs of its own, the others rerun nothing (generate reruns when "
                     "its questions change)")
        return said

    return [RERUN_TABLE[0], "", "| key | jobs a change reruns (then what is made from their outputs) |", "|---|---|",
            *(f"| `{key}` | {jobs(key, stages)} |" for key, stages in rows), "", RERUN_TABLE[1]]
