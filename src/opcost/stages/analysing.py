"""The analysing stages: the database, validation, predictions of the unprofiled, the coverage loop's evaluation,
figures, failures and placement advice: each what one Snakemake rule's script calls (see :mod:`opcost.stages`)."""
from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from opcost import io, tables, trace_tables
from opcost.analysis.hosts import prediction_host
from opcost.database import of_workload
from opcost.errors import OpcostError
from opcost.measure.job import prepare_process
from opcost.report import figures
from opcost.report.figures import FigureFiles

log = logging.getLogger("opcost")


def database(measurement_paths, e2e_paths, layer_paths, out_measurements, out_e2e, out_layers, out_overheads=None,
             overhead_paths=(), op_type_paths=()) -> None:
    """The run's database tables from its shards; `overheads` from the workloads' trace tables
    (:func:`opcost.analysis.predict.overhead_rows`)."""
    from opcost.analysis.predict import overhead_rows

    layers = io.read_many(layer_paths, tables.LAYERS)
    e2e = io.read_many(e2e_paths, tables.E2E)
    io.write_parquet(layers, out_layers, tables.LAYERS)
    io.write_parquet(io.read_many(measurement_paths, tables.MEASUREMENTS), out_measurements, tables.MEASUREMENTS)
    io.write_parquet(e2e, out_e2e, tables.E2E)
    if out_overheads is not None:
        rows = overhead_rows(io.read_many(overhead_paths, trace_tables.TRACE_OVERHEADS),
                             io.read_many(op_type_paths, trace_tables.TRACE_OP_TYPES), layers, e2e)
        io.write_parquet(rows, out_overheads, tables.OVERHEADS)


def _traces(overhead_paths, op_type_paths) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The workloads' `trace_overheads` and `trace_op_types` tables, read once; None without traces."""
    if not overhead_paths:
        return None
    return (io.read_many(overhead_paths, trace_tables.TRACE_OVERHEADS),
            io.read_many(op_type_paths, trace_tables.TRACE_OP_TYPES))


def _overhead(overhead_paths, op_type_paths) -> dict | None:
    """Modelled overhead per workload from its trace tables (:func:`opcost.analysis.predict.trace_overhead`); None
    without."""
    from opcost.analysis.predict import trace_overhead

    traced = _traces(overhead_paths, op_type_paths)
    return trace_overhead(*traced) if traced is not None else None


@dataclass
class ValidationFiles:
    """What :func:`validate` reads: the workloads' `layers` tables, the database's `measurements` and `e2e`, and
    the workloads' trace tables (`overheads`, `op_types`) that model the gaps between operators."""
    layers: list
    measurements: str
    e2e: str
    overheads: list = field(default_factory=list)
    op_types: list = field(default_factory=list)


@dataclass
class ValidationOutputs:
    """What :func:`validate` writes: `predictions` (Parquet and ``tsv``), `consistency`, and the whole model on
    each slower tier (``tiers``, ``tiers_tsv``; none: not computed)."""
    predictions: str
    tsv: str
    consistency: str
    tiers: str | None = None
    tiers_tsv: str | None = None


def validate(config, inputs: ValidationFiles, out: ValidationOutputs) -> pd.DataFrame:
    """The `predictions` of every workload against its end-to-end time, the isolated/in-situ `consistency`, and
    (``out.tiers``) the whole model on each slower memory tier (`tier_costs`, :mod:`opcost.analysis.tiers`)."""
    from opcost.analysis.predict import consistency, from_traces, predict
    from opcost.analysis.tiers import whole_model
    from opcost.measure.plain import against_plain

    layers = io.read_many(inputs.layers, tables.LAYERS)
    meas = io.read_parquet(inputs.measurements, tables.MEASUREMENTS)
    e2e = io.read_parquet(inputs.e2e, tables.E2E)
    traced = _traces(inputs.overheads, inputs.op_types)
    overhead, walks = from_traces(*traced) if traced else (None, None)
    pred = against_plain(predict(layers, meas, e2e, config["device"], overhead=overhead,
                                 statistic=config["statistic"], walks=walks), e2e)
    io.write_parquet(pred, out.predictions, tables.PREDICTIONS)
    io.write_text(pred.to_csv(sep="\t", index=False, float_format="%.6g"), out.tsv)
    io.write_parquet(consistency(layers, meas, config["device"]), out.consistency, tables.CONSISTENCY)
    if out.tiers is not None:
        placed = whole_model(layers, meas, config["device"], config["statistic"], e2e)
        io.write_parquet(placed, out.tiers, tables.TIER_COSTS)
        if out.tiers_tsv is not None:
            io.write_text(placed.to_csv(sep="\t", index=False, float_format="%.6g"), out.tiers_tsv)
        for r in placed.itertuples():
            log.info("%s %s b%d on %s: predicted %.3f ms, %.2fx all on the fast tier (%.0f%% of it measured); "
                     "measured %s", r.model, r.mode, r.batch, r.tier, r.predicted_s * 1e3, r.slowdown,
                     100 * r.measured_share, "-" if pd.isna(r.measured_slowdown) else f"{r.measured_slowdown:.2f}x")
    for r in pred.itertuples():
        log.info("%s %s b%d %s: predicted %.3f ms, measured %.3f ms, ratio %.3f", r.model, r.mode, r.batch,
                 r.source, r.predicted_s * 1e3, r.measured_s * 1e3, r.ratio)
    return pred


def _read_db(db_paths: dict) -> dict[str, pd.DataFrame]:
    """The database tables a rule was given (``db_paths``: table name -> path), the others empty."""
    from opcost.database import DB_TABLES

    return {name: io.read_parquet(db_paths[name], t) if name in db_paths else tables.frame(t, [])
            for name, t in DB_TABLES.items()}


def predict_unseen(config: Mapping, db_paths: dict, unseen_layer_paths, unseen_e2e_paths, out, out_tsv,
                   out_calibration=None, traces=None, forced: bool = True) -> pd.DataFrame:
    """The `predict_only` workloads predicted from the run's database (``db_paths``: `layers`, `measurements`,
    `e2e` paths; its cost model is saved beside them), each against its own end-to-end time (timed in turn with
    profiled controls, in the database's minutes, where its job did: :mod:`opcost.measure.control`; else its
    dedicated timing): `predictions` rows of source `estimated`, and their errors as the database's `calibration`
    table (``out_calibration``: :mod:`opcost.analysis.calibration`). A workload that cannot be predicted is logged
    and left out; the others go on. ``traces``: a folder that keeps each workload's short trace for a rerun at the
    same settings (the database rebuilt, a changed `statistic`), unless the job is ``forced`` (then traced
    afresh)."""
    from opcost.analysis import calibration
    from opcost.analysis.estimate import condition_key, predict_workload
    from opcost.analysis.predict import references
    from opcost.measure.control import METHOD as CONTROL
    from opcost.measure.control import in_database_minutes

    if traces is not None and forced:
        shutil.rmtree(traces, ignore_errors=True)
    db = _read_db(db_paths)
    e2e = io.read_many(unseen_e2e_paths, tables.E2E)
    profiled = references(db["e2e"], config["device"], "isolated", config["statistic"])  # the controls' among them
    rows, keys = [], []
    for path in unseen_layer_paths:
        layers = io.read_parquet(path, tables.LAYERS)
        if layers.empty:  # extraction failed: recorded in results/failures.tsv
            continue
        model, batch, mode = layers["model"].iloc[0], int(layers["batch"].iloc[0]), layers["mode"].iloc[0]
        mine = of_workload(e2e, model, batch, mode)
        ask = dict(db_dir=Path(db_paths["measurements"]).parent, statistic=config["statistic"],
                   device=config["device"], threads=config["threads"],
                   host=prediction_host(db["measurements"], mine, config))
        try:
            try:  # its own glue, from a short trace taken now; else the database's, borrowed
                p = predict_workload(db, layers, trace_now=(model, config["predict_only"][model]),
                                     trace_keep=_kept_trace(traces, layers), **ask)
            except OpcostError as e:
                log.warning("%s %s b%d: predicted without a trace of its own: %s", model, mode, batch, e)
                p = predict_workload(db, layers, **ask)
        except OpcostError as e:
            log.error("%s %s b%d: cannot predict: %s", model, mode, batch, e)
            continue
        ref = references(mine, config["device"], "isolated", config["statistic"])
        measured, method = ref.get((model, batch, mode), (None, None))
        dedicated = measured
        if (scaled := in_database_minutes(mine, profiled)) is not None:  # the host's drift cancelled
            measured, method = scaled, CONTROL
        ratio = p.predicted_s / measured if measured else None
        rows.append({"model": model, "batch": batch, "mode": mode, "device": config["device"],
                     "source": "estimated", "statistic": config["statistic"], "placement": "baseline",
                     "overhead_s": p.overhead_s, "predicted_s": p.predicted_s, "measured_s": measured,
                     "reference": method, "reference_spread": None, "ratio": ratio,
                     "error": ratio - 1 if ratio is not None else None,
                     "configs": int(layers["config_id"].nunique()),
                     "configs_measured": int(p.layers.loc[p.layers["method"] == "measured", "config_id"].nunique()),
                     "calls_covered": 1.0, "predicted_j": p.predicted_j, "measured_j": None,
                     "low_s": p.low_s, "high_s": p.high_s, "estimated_share": p.estimated_share})
        keys.append(condition_key(p.conditions))
        log.info("%s %s b%d: predicted %.3f ms [%.3f, %.3f], %.0f%% estimated; measured %s (%s; in its own job "
                 "%s)", model, mode, batch, p.predicted_s * 1e3, p.low_s * 1e3, p.high_s * 1e3,
                 100 * p.estimated_share, f"{measured * 1e3:.3f} ms" if measured else "none", method,
                 f"{dedicated * 1e3:.3f} ms" if dedicated else "none")
    pred = tables.frame(tables.PREDICTIONS, rows)
    io.write_parquet(pred, out, tables.PREDICTIONS)
    io.write_text(pred.to_csv(sep="\t", index=False, float_format="%.6g"), out_tsv)
    if out_calibration is not None:
        cal = calibration.write(pred, pd.Series(keys, dtype="string"), Path(db_paths["measurements"]).parent,
                                out_calibration)
        log.info("calibration: %d workloads of %d models never profiled", len(cal), cal["model"].nunique())
    return pred


def _kept_trace(traces, layers: pd.DataFrame):
    """Where the short trace of the workload ``layers`` is kept (None: nowhere), for its operator calls as they are."""
    from opcost.analysis.tracing import KeptTrace
    from opcost.journal import settings_key

    if traces is None:
        return None
    calls = sorted(zip(layers["config_id"].astype(str), layers["count"].astype(int).tolist()))
    return KeptTrace(Path(traces), settings_key(calls))


@dataclass
class EvaluationFiles:
    """What :func:`evaluate` reads: the catalogue (`configs`), the previous iteration's evaluation (None in the
    first), the workloads' `layers`, the `measurements` and `e2e` shards so far, and the workloads' trace tables."""
    configs: str
    previous: str | None
    layers: list
    measurements: list
    e2e: list
    overheads: list = field(default_factory=list)
    op_types: list = field(default_factory=list)


def validate_generate(config: Mapping, questions, db_paths: dict, out, out_tsv) -> pd.DataFrame:
    """The config's generate() ``questions`` ((model, batch, prompt, new): :func:`opcost.config.generate_questions`)
    predicted from the run's database (``db_paths``: its tables) and timed itself
    (:func:`opcost.analysis.generate.check`): `generate` rows. A question that cannot be answered is logged and left
    out; the others go on."""
    from opcost.analysis import generate

    db = _read_db(db_paths)
    host = prediction_host(db["measurements"], db["e2e"], config)
    prepare_process(config)
    rows = []
    for model, batch, prompt, new in questions:
        try:
            row = generate.check(db, generate.Question(model, batch, prompt, new), config["models"][model], config,
                                 Path(db_paths["measurements"]).parent, host)
        except (OpcostError, ValueError, RuntimeError) as e:
            log.error("%s b%d generate() of %d tokens from %d: %s", model, batch, new, prompt, e)
            continue
        rows.append(row)
        log.info("%s b%d generate() of %d tokens from %d: predicted %.3f ms [%.3f, %.3f], measured %.3f ms (%+.1f%%)",
                 model, batch, new, prompt, row["predicted_s"] * 1e3, row["low_s"] * 1e3, row["high_s"] * 1e3,
                 row["measured_s"] * 1e3, row["error"] * 100)
    out_table = tables.frame(tables.GENERATE, rows)
    io.write_parquet(out_table, out, tables.GENERATE)
    io.write_text(out_table.to_csv(sep="\t", index=False, float_format="%.6g"), out_tsv)
    return out_table


def evaluate(config, iteration: int, inputs: EvaluationFiles, out) -> dict:
    """Iteration ``iteration`` of the coverage loop (:func:`opcost.analysis.loop.evaluate`) into ``out``."""
    from opcost.analysis.loop import LoopSettings, op_types_for, summary_text
    from opcost.analysis.loop import evaluate as run

    settings = LoopSettings.from_config(config["loop"])
    configs = io.read_parquet(inputs.configs, tables.CONFIGS)
    profiled = op_types_for(iteration, settings, sorted(set(configs["op_type"])), io.read_json(inputs.previous))
    ev = run(iteration, profiled, io.read_many(inputs.layers, tables.LAYERS),
             io.read_many(inputs.measurements, tables.MEASUREMENTS), io.read_many(inputs.e2e, tables.E2E), settings,
             config["device"], _overhead(inputs.overheads, inputs.op_types), config["statistic"])
    io.write_json(ev, out)
    log.info("%s", summary_text([ev]))
    log.info("next operator types: %s", ", ".join(ev["next_op_types"]) or "none")
    return ev


def loop_summary(evaluation_paths, out_summary, out_text, out_fragment) -> None:
    import yaml

    from opcost.analysis.loop import fragment, summary_text

    evaluations = [io.read_json(p) for p in evaluation_paths]
    io.write_json(evaluations, out_summary)
    io.write_text(summary_text(evaluations) + "\n", out_text)
    io.write_text("# significant operator types found by the coverage loop; use with --configfile\n"
                  + yaml.safe_dump(fragment(evaluations), sort_keys=False), out_fragment)
    log.info("%s", summary_text(evaluations))


def make_figures(config, files: FigureFiles, outdir, failures=None, summary=None) -> None:
    """Every figure (:mod:`opcost.report.figures`) into ``outdir`` from ``files``, and the run's summary
    (:mod:`opcost.report.summary`; ``failures``: results/failures.tsv) into ``summary`` when given. A run with decode
    steps also gets the decode figure, its steps predicted from the database beside ``files.measurements``."""
    from opcost.failures import read_tsv
    from opcost.model.modes import is_decode
    from opcost.report.summary import run_facts, run_summary

    inputs = files.read(config["device"], config["statistic"])
    if any(is_decode(str(m)) for m in inputs.layers["mode"].dropna()):  # only a run with decode steps
        inputs.decode = decode_curves(config, Path(files.measurements).parent)
    for p in figures.make_all(inputs, outdir):
        log.info("wrote %s", p)
    if summary is not None:
        fail = read_tsv(failures) if failures else tables.frame(tables.FAILURES, [])
        io.write_text(run_summary(inputs.predictions, inputs.evaluations, fail, inputs.unseen, str(outdir),
                                  inputs.tier_costs, run_facts(inputs.measurements, inputs.e2e, config),
                                  inputs.generate), summary)
        log.info("wrote %s", summary)


def decode_curves(config, db_dir) -> pd.DataFrame:
    """The run's decode steps predicted from its database at ``db_dir`` at the measured context lengths and beyond
    them, beside their measured steps (:func:`opcost.analysis.decode_curves.curves`): the decode figure's input."""
    from opcost.analysis.decode_curves import curves
    from opcost.database import read_db

    db = read_db(db_dir)
    return curves(db, db_dir, config["models"], config["statistic"], config["dtype"], device=config["device"],
                  threads=config["threads"], host=prediction_host(db["measurements"], db["e2e"], config))


def failures(failure_paths, measurements_path, layers_path, out_tsv) -> pd.DataFrame:
    """Every failure of the run (:func:`opcost.failures.collect`) to ``out_tsv``, and the short list in the log."""
    from opcost.failures import collect, text

    df = collect(io.read_many(failure_paths, tables.FAILURES),
                 io.read_parquet(measurements_path, tables.MEASUREMENTS), io.read_parquet(layers_path, tables.LAYERS))
    io.write_text(df.to_csv(sep="\t", index=False), out_tsv)
    (log.warning if len(df) else log.info)("%s", text(df))
    return df


def advise(config: Mapping, db_paths: dict, out_plans: dict, out_figure) -> list[dict]:
    """Where each tensor should live under the config's fast-memory budgets: one plan file per workload
    (``out_plans``: (model, mode, batch) -> path; :func:`opcost.analysis.advise.advise_all`) and the figure, from the
    database's placement measurements (``db_paths``: table name -> path); nothing is measured."""
    from opcost.analysis.advise import advise_all
    from opcost.report.advice import advise_figure

    db = _read_db(db_paths)
    docs = advise_all(config, db, Path(db_paths["measurements"]).parent, out_plans)
    log.info("wrote %s", advise_figure(docs, out_figure))
    return docs
