"""One job of a Snakemake rule: what its script calls. Logging to the rule's log, the stage's config from the
rule's params (:class:`opcost.config.StageConfig`), a per-workload stage's failure kept to its workload
(:func:`guarded`), and an error as one line (:func:`run_rule`)."""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from opcost import io, tables
from opcost.config import StageConfig, UndeclaredKey
from opcost.errors import HOST_ERRNOS, OpcostError, from_os_error

log = logging.getLogger("opcost")


def setup_logging(log_path=None) -> None:
    handlers = [logging.StreamHandler(sys.stderr)]
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_path, mode="w"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", handlers=handlers,
                        force=True)


def stage_config(smk, stage: str) -> StageConfig:
    """What a Snakemake script passes its stage: the config keys of the rule's params (``settings``) only
    (:class:`opcost.config.StageConfig`)."""
    return StageConfig.from_params(stage, smk.params.settings, dict(smk.wildcards.items()).get("model"))


def guarded(stage: str, model: str, mode: str, batch: int, out_failures, empty: dict, body) -> None:
    """Run one workload's stage, ``body()``, which returns the failure rows of configurations it went on without
    (or nothing). Without ``out_failures`` (the CLI) an error propagates. With it, an error of the whole workload is
    recorded as a failure row, every output in ``empty`` (path -> :class:`opcost.tables.Table`, or a function
    writing the path) is written empty, and the stage succeeds: the run goes on with the other workloads. The
    failure rows are written to ``out_failures`` (table :data:`opcost.tables.FAILURES`; empty when all went well).
    A stage reading a config key outside its rule's params (:class:`opcost.config.UndeclaredKey`) fails the job.
    Callers run :func:`opcost.measure.job.prepare_process` first: a host that cannot run the config at all (a CUDA
    device it lacks) fails the job, not one workload."""
    from opcost.failures import failure
    from opcost.model.workload import workload_key

    key = workload_key(model, mode, batch)
    try:
        rows = list(body() or [])
    except Exception as e:
        if out_failures is None or isinstance(e, UndeclaredKey) or (isinstance(e, OSError)
                                                                    and e.errno in HOST_ERRNOS):
            raise
        if isinstance(e, OpcostError):
            reason = str(e)
            log.error("%s failed: %s", stage, reason)
        else:
            reason = failure(e)
            log.exception("%s failed (the run goes on without this workload)", stage)
        rows = [{"config_id": None, "op_type": None, "reason": reason}]
        for path, table in empty.items():
            table(path) if callable(table) else io.write_parquet(tables.frame(table, []), path, table)
    if out_failures is not None:
        io.write_parquet(tables.frame(tables.FAILURES, [{"stage": stage, "workload": key, "kind": "failed", **r}
                                                        for r in rows]),
                         out_failures, tables.FAILURES)


def run_rule(smk, fn, *args, **kwargs):
    """Entry point of a Snakemake script: log to the rule's log, turn an OpcostError or an OS error (disk full,
    permission denied) into one line and exit 1."""
    from opcost.journal import FOLDER, RunMark, job_of

    setup_logging(smk.log[0] if smk.log else None)
    mark = RunMark(FOLDER, job_of(smk.rule, smk.wildcards.items()))
    try:
        # a run that fails or is stopped from here on is redone by a plain rerun (opcost.journal.RunMark)
        if mark.unfinished():
            log.info("the last run of this job did not complete: redoing it")
        scheduled_with = mark.start()
        out = fn(*args, **kwargs)
        mark.done(scheduled_with)
        return out
    except (OpcostError, OSError) as e:  # OSError: disk full, permission denied... named with the path and remedy
        err = from_os_error(e) if isinstance(e, OSError) else e
        log.error("%s", err)
        sys.exit(f"opcost: {err}")
    except Exception:
        log.exception("unexpected error (a bug in opcost: please report it with this log)")
        raise
