"""One function per workflow stage: what a Snakemake rule's script (and the ``opcost`` CLI) calls.

Each takes its rule's slice of the config (:class:`opcost.config.StageConfig`: the keys of the rule's params, so that
a changed key reruns the jobs it shapes; the CLI passes a whole validated config) and paths, reads its inputs, and
writes its outputs atomically.
"""
from __future__ import annotations

import json
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from opcost import io, tables
from opcost.analysis.hosts import prediction_host
from opcost.database import catalog, of_workload
from opcost.errors import OpcostError
from opcost.measure.job import JobEnergy, prepare_process
from opcost.report import figures
from opcost.report.figures import FigureFiles
from opcost.rule import guarded

log = logging.getLogger("opcost")


def _workload(config, model: str, mode: str, batch: int, entry: dict | None = None):
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    if entry is None and model not in config["models"]:
        raise OpcostError(f"model {model}", "not in config `models`")
    loaded = load_model(model, entry or config["models"][model], config["device"], config["dtype"])
    return make_workload(loaded, int(batch), mode)


def extract(config: Mapping, model: str, mode: str, batch: int, out, out_failures=None) -> None:
    """Operator configurations of one workload (table `layers`); ``out_failures``: :func:`opcost.rule.guarded`."""
    from opcost.model.extract import extract as run

    def body():
        from opcost.model.sanity import warnings

        wl = _workload(config, model, mode, batch)
        df = run(wl)
        io.write_parquet(df, out, tables.LAYERS)
        log.info("%s %s b%s: %d configurations, %d calls per iteration", model, mode, batch, len(df),
                 df["count"].sum())
        found = warnings(wl)  # what makes its costs suspect: reported in the summary, the workload still measured
        for why in found:
            log.warning("model %s: %s", model, why)
        return [{"config_id": None, "op_type": None, "reason": f"model {model}: {why}", "kind": "warning"}
                for why in found]

    prepare_process(config, measuring=False)
    guarded("extract", model, mode, batch, out_failures, {out: tables.LAYERS}, body)


def extract_sweeps(config: Mapping, out, out_failures) -> None:
    """Operator configurations of every sweep point (:mod:`opcost.model.sweeps`), in one process, into one `layers`
    table; a point that fails is recorded and the others go on."""
    from opcost.config import sweep_entries
    from opcost.model.extract import extract as run

    prepare_process(config, measuring=False)
    parts, failures = [], []
    points = [(model, mode, int(batch), entry) for model, entry in sweep_entries(config).items()
              for mode in entry["modes"] for batch in entry["batch_sizes"]]
    for model, mode, batch, entry in points:
        def body(model=model, mode=mode, batch=batch, entry=entry):
            parts.append(run(_workload(config, model, mode, batch, entry)))

        tmp = Path(out_failures).with_name(f".{model}_{mode}_b{batch}.failures.parquet")
        guarded("extract", model, mode, batch, tmp, {}, body)
        failures.append(io.read_parquet(tmp, tables.FAILURES))
        tmp.unlink()
    layers = pd.concat([tables.frame(tables.LAYERS, []), *parts], ignore_index=True)
    io.write_parquet(layers, out, tables.LAYERS)
    io.write_parquet(pd.concat([tables.frame(tables.FAILURES, []), *failures], ignore_index=True), out_failures,
                     tables.FAILURES)
    log.info("%d sweep points: %d configurations", len(parts), layers["config_id"].nunique())


def placement_tiers(config: Mapping, out) -> dict:
    """What memory this host has and which configured tiers are usable (strict: an error names the missing tier)."""
    from opcost.measure.placement import Settings, discover, usable_tiers

    settings = Settings.from_config(config["placement"])
    found = discover()
    ok, skipped = usable_tiers(settings, config["device"], found)
    report = {"host": socket.gethostname(), "device": config["device"], "discovered": found,
              "tiers": [{"name": t.name, "kind": t.kind, "where": t.where} for t in settings.tiers],
              "usable": [t.name for t in ok], "skipped": skipped}
    io.write_json(report, out)
    nodes = ", ".join(f"node{n['node']}{' (no CPUs)' if n['cpu_less'] else ''}" for n in found["numa_nodes"])
    log.info("NUMA nodes: %s; GPUs: %s", nodes or "none", ", ".join(found["gpus"]) or "none")
    for why in skipped.values():
        log.warning("skipped %s", why)
    log.info("placement tiers used: %s", ", ".join(report["usable"]) or "none (default placement only)")
    return report


def make_catalog(layer_paths, out) -> pd.DataFrame:
    df = catalog(io.read_many(layer_paths, tables.LAYERS))
    io.write_parquet(df, out, tables.CONFIGS)
    log.info("%d operator configurations", len(df))
    return df


def profile(config: Mapping, configs_path, iteration: int, chunk: int, previous_evaluation, out_measurements,
            out_samples, out_e2e=None, journal_dir="results/journal", forced: bool = True) -> pd.DataFrame:
    """Isolated profiling of the configurations whose op type is new in loop ``iteration`` and which hash to
    ``chunk``; resumes the journal of its interrupted run. A completed run's journal is reused whole when it holds
    every configuration of the chunk and the job is not ``forced`` (its outputs were deleted, or its catalogue made
    again the same), else discarded: a forced rerun measures afresh. ``out_e2e``: the model iterations timed inside
    its rotations (`e2e` rows of method `rotation`; empty when none ran)."""
    from opcost.analysis.loop import ALL, LoopSettings, new_op_types
    from opcost.journal import for_job, profile_job, settings_key
    from opcost.measure.engine import engine_call_s, needs_engine, without_engine_calls
    from opcost.measure.profile import METHOD_VERSION, ProfileSettings, chunk_of, profile_configs
    from opcost.config import is_sweep

    job = profile_job(iteration, chunk)
    prepare_process(config)
    configs = io.read_parquet(configs_path, tables.CONFIGS)
    previous = io.read_json(previous_evaluation)
    loop = LoopSettings(initial_op_types=tuple((config.get("loop") or {}).get("initial_op_types") or ()))
    types = new_op_types(iteration, loop, sorted(set(configs["op_type"])), previous)
    absent = sorted(set(loop.initial_op_types) - set(configs["op_type"]) - {ALL})
    if iteration == 0 and absent:
        log.warning("config: loop.initial_op_types: no workload has operator type(s) %s", ", ".join(absent))
    chunks = int(config["profile"]["chunks"])
    in_chunk = configs["config_id"].map(lambda c: chunk_of(c, chunks)) == int(chunk)
    # sweep points' configurations (opcost.model.sweeps) are all profiled in the first iteration, whatever their type
    swept = configs["models"].map(lambda ms: any(is_sweep(config["models"].get(m, {})) for m in json.loads(ms)))
    chosen = swept if iteration == 0 else pd.Series(False, index=configs.index)
    mine = configs[((configs["op_type"].isin(types) & ~swept) | chosen) & in_chunk]
    # rotation context: every other configuration (rotations are per workload: the workload's other operators, of
    # every type and chunk, run untimed between the timed ones, as in the model)
    context = configs[~configs["config_id"].isin(mine["config_id"])]
    log.info("iteration %d, chunk %d/%d: %d of %d configurations (op types: %s)", iteration, chunk, chunks,
             len(mine), len(configs), ", ".join(types))
    profiling = ProfileSettings.from_config(config)
    key = settings_key(METHOD_VERSION, profiling.timing, config["device"], config["dtype"], config["threads"],
                       profiling.remeasure, profiling.placement, profiling.cache, config["affinity"],
                       profiling.rotation_size, profiling.order, profiling.visits)
    journal = for_job(journal_dir, job, key, keep_completed=True)
    completed = journal.completed()
    if completed and (forced or not set(mine["config_id"]) <= journal.config_ids()):
        # a forced rerun measures afresh, and so does a chunk with configurations its last run did not measure: the
        # measurements of one run of a job are never mixed with those of another
        journal.discard("of a run that completed" + (", forced to run again" if forced else
                                                     ", without some of this chunk's configurations"))
    elif completed:  # its outputs deleted or damaged, or made again upstream, the same configurations
        log.info("journal %s: of a completed run of the same configurations and settings: reused whole (a run "
                 "forced with -R on this job's outputs measures afresh)", journal.path)
    # an interrupted run's configurations still in this chunk (a catalogue that changed since keeps the rest), and
    # the model iterations of its rotations: the reference their configurations are checked against
    done_rows, done_samples = journal.load(keep_ids=set(mine["config_id"]))
    done_e2e, done_e2e_samples = journal.load_e2e()
    try:
        done_meas = tables.frame(tables.MEASUREMENTS, done_rows)
        done_samples = tables.frame(tables.SAMPLES, done_samples)
        e2e_rows = [tables.frame(tables.E2E, done_e2e)]
        e2e_samples = [tables.frame(tables.SAMPLES, done_e2e_samples)]
    except (ValueError, TypeError) as e:  # rows of another opcost version's tables
        raise journal.unusable(f"holds rows this opcost cannot read ({e})") from None
    done = set(done_meas["config_id"])
    if done:
        log.info("journal %s: %d configurations already measured, resuming", journal.path, len(done))
    energy = JobEnergy(config)

    def on_e2e(row: pd.DataFrame, smp: pd.DataFrame) -> None:
        e2e_rows.append(row)
        e2e_samples.append(smp)
        journal.append_e2e(row.to_dict("records"), smp.to_dict("records"))

    meas, samples = profile_configs(mine[~mine["config_id"].isin(done)], config["models"], config["device"],
                                    config["dtype"], profiling, on_result=journal.append, energy=energy,
                                    context=context, on_e2e=on_e2e)
    energy.close()
    meas = pd.concat([done_meas, meas], ignore_index=True)
    samples = pd.concat([done_samples, samples, *e2e_samples], ignore_index=True)
    if needs_engine(meas):  # backward rows measured outside a rotation (other placements, back-to-back states)
        engine_s = engine_call_s(config["device"], profiling.timing)
        meas, samples = without_engine_calls(meas, samples, engine_s)
        log.info("autograd engine measured alone: %.1f us per backward call, taken out of the isolated backward rows "
                 "measured outside a rotation", engine_s * 1e6)
    if out_e2e is not None:
        io.write_parquet(pd.concat(e2e_rows, ignore_index=True), out_e2e, tables.E2E)
    io.write_parquet(samples, out_samples, tables.SAMPLES)
    io.write_parquet(meas, out_measurements, tables.MEASUREMENTS)
    journal.complete()  # outputs written: a later run of this job reuses it whole, or measures afresh if forced
    n = meas["config_id"].nunique()  # an empty chunk (no configuration of its types hashes to it) is normal
    log.info("SUMMARY chunk %d: %d configurations: %d measured now, %d resumed from the journal, %d failed, "
             "%d still noisy after re-measuring", chunk, n, n - len(done), len(done),
             meas.loc[meas["status"] != "ok", "config_id"].nunique(),
             meas.loc[meas["noisy"].fillna(False).astype(bool), "config_id"].nunique())
    return meas


def e2e(config: Mapping, model: str, mode: str, batch: int, out, out_samples, out_failures=None) -> None:
    from opcost.measure import plain
    from opcost.measure.e2e import measure_e2e
    from opcost.measure.timing import TimingSettings

    def body():
        wl = _workload(config, model, mode, batch)
        energy = JobEnergy(config)
        settings = TimingSettings.from_config(config["e2e"]["timing"])
        row, samples = measure_e2e(wl, settings, config["device"], energy)
        energy.close()
        log.info("%s %s b%s: %.3f ms per iteration (n=%d)", model, mode, batch, row["median_s"].iloc[0] * 1e3,
                 row["n"].iloc[0])
        warned = []
        if config["e2e"].get("plain", True):  # as a user's own script runs it: the gap is reported
            del wl
            try:
                p_row, p_samples = plain.time_plain(model, config["models"][model], batch, mode, config, settings)
            except Exception as e:  # the dedicated timing stands: a warning, not a failure
                log.warning("%s %s b%s: %s", model, mode, batch, e)
                warned.append({"config_id": None, "op_type": None, "reason": f"model {model}: {e}",
                               "kind": "warning"})
            else:
                log.info("%s %s b%s: %.3f ms per iteration in a plain process (%s), %+.1f%%", model, mode, batch,
                         p_row["median_s"].iloc[0] * 1e3, plain.CONDITIONS,
                         (p_row["median_s"].iloc[0] / row["median_s"].iloc[0] - 1) * 100)
                row = pd.concat([row, p_row], ignore_index=True)
                samples = pd.concat([samples, p_samples], ignore_index=True)
        io.write_parquet(samples, out_samples, tables.SAMPLES)
        io.write_parquet(row, out, tables.E2E)
        return warned

    prepare_process(config)
    guarded("e2e", model, mode, batch, out_failures, {out: tables.E2E, out_samples: tables.SAMPLES}, body)


def e2e_tier(config: Mapping, model: str, mode: str, batch: int, tier: str, unbound: str | None, out, out_samples,
             out_failures=None) -> None:
    """End-to-end timing of one workload with its memory on the slower NUMA tier ``tier`` (`e2e` method `tier`,
    :func:`opcost.measure.e2e.measure_on_tier`), the check of its placements against the whole model on that tier
    predicted from isolated placements. The caller bound the process to the tier before torch started
    (:func:`opcost.measure.numa.bind_to_tier`); ``unbound``: why it could not (a tier this host lacks, a GPU tier),
    which writes empty tables and logs the reason."""
    from opcost.measure.e2e import measure_on_tier
    from opcost.measure.placement import Placer, usable_tiers
    from opcost.measure.placement import Settings as PlacementSettings
    from opcost.measure.profile import matches_all
    from opcost.measure.timing import TimingSettings

    empty = {out: tables.E2E, out_samples: tables.SAMPLES}

    def body():
        if unbound is not None:
            log.warning("%s %s b%s not timed on tier %s: %s", model, mode, batch, tier, unbound)
            for path, table in empty.items():
                io.write_parquet(tables.frame(table, []), path, table)
            return
        placement = PlacementSettings.from_config(config["placement"])
        tiers, _ = usable_tiers(placement, config["device"])
        wl = _workload(config, model, mode, batch)
        row, samples = measure_on_tier(wl, TimingSettings.from_config(config["e2e"]["timing"]), config["device"],
                                       Placer(tiers, config["device"]), tier, placement.tiers[0].name,
                                       placement.params)
        io.write_parquet(samples, out_samples, tables.SAMPLES)
        io.write_parquet(row, out, tables.E2E)
        r = row.iloc[0]
        ok = matches_all(r["placement"], r["placement_verified"])
        (log.info if ok else log.warning)("%s %s b%s on %s: %.3f ms per iteration (n=%d); placement %s, found %s%s",
                                          model, mode, batch, tier, r["median_s"] * 1e3, r["n"], r["placement"],
                                          r["placement_verified"], "" if ok else " (MISMATCH)")

    prepare_process(config)
    guarded("e2e_tier", model, mode, batch, out_failures, empty, body)


def insitu(config: Mapping, model: str, mode: str, batch: int, out, out_samples, out_e2e, out_failures=None) -> None:
    from opcost.measure.insitu import profile_insitu
    from opcost.measure.timing import TimingSettings

    def body():
        wl = _workload(config, model, mode, batch)
        meas, samples, e2e_row = profile_insitu(wl, TimingSettings.from_config(config["insitu"]["timing"]),
                                                config["device"])
        io.write_parquet(e2e_row, out_e2e, tables.E2E)
        io.write_parquet(samples, out_samples, tables.SAMPLES)
        io.write_parquet(meas, out, tables.MEASUREMENTS)
        log.info("%s %s b%s: %d in-situ rows, median samples %d", model, mode, batch, len(meas),
                 int(meas["n"].median()) if len(meas) else 0)

    prepare_process(config)
    guarded("insitu", model, mode, batch, out_failures,
             {out: tables.MEASUREMENTS, out_samples: tables.SAMPLES, out_e2e: tables.E2E}, body)


TRACE_PARTS = ("op_types", "iterations", "op_kernels", "overheads", "overhead_samples")


def trace(config: Mapping, model: str, mode: str, batch: int, out_trace, out_tables: dict, out_failures=None) -> None:
    """Kineto trace of the workload's end-to-end iterations (Perfetto-readable JSON) and its analysis tables
    (``out_tables``: part name in :data:`TRACE_PARTS` -> path). A configuration that cannot be replayed is left
    out of the replayed iterations (a failure row); see :func:`opcost.rule.guarded` for ``out_failures``."""
    from opcost.analysis.overhead import trace_prediction, trace_workload
    from opcost.measure.trace import write_empty

    def body():
        wl = _workload(config, model, mode, batch)
        settings = config["trace"]
        # the gaps isolated costs already include, from the replayed operators recorded alongside
        traced = trace_workload(wl, config["models"], out_trace, config["device"], config["dtype"],
                                iterations=int(settings["iterations"]), warmup=int(settings["warmup"]),
                                e2e_every=int(config["profile"]["e2e_every"]))
        tt, left_out = traced.tables, traced.left_out
        for part in TRACE_PARTS:
            io.write_parquet(traced.parts[f"trace_{part}"], out_tables[part], getattr(tables, f"TRACE_{part.upper()}"))
        check = trace_prediction(tt)
        log.info("%s %s b%s: %d traced iterations, median %.3f ms; top-level ops' %s time %.3f ms (%+.1f%%); "
                 "with modelled gaps %.3f ms (%+.1f%%)", model, mode, batch, tt.n_iterations,
                 check["measured_s"] * 1e3, "device" if tt.has_device else "CPU",
                 check["plain_s"] * 1e3, check["plain_error"] * 100, check["predicted_s"] * 1e3,
                 check["error"] * 100)
        return [{"config_id": cid, "op_type": op, "reason": f"left out of the replayed iterations: {why}"}
                for cid, (op, why) in left_out.items()]

    empty = {out_tables[p]: getattr(tables, f"TRACE_{p.upper()}") for p in TRACE_PARTS}
    prepare_process(config)
    guarded("trace", model, mode, batch, out_failures, {out_trace: write_empty, **empty}, body)


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
        rows = overhead_rows(io.read_many(overhead_paths, tables.TRACE_OVERHEADS),
                             io.read_many(op_type_paths, tables.TRACE_OP_TYPES), layers, e2e)
        io.write_parquet(rows, out_overheads, tables.OVERHEADS)


def _traces(overhead_paths, op_type_paths) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The workloads' `trace_overheads` and `trace_op_types` tables, read once; None without traces."""
    if not overhead_paths:
        return None
    return (io.read_many(overhead_paths, tables.TRACE_OVERHEADS), io.read_many(op_type_paths, tables.TRACE_OP_TYPES))


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

    layers = io.read_many(inputs.layers, tables.LAYERS)
    meas = io.read_parquet(inputs.measurements, tables.MEASUREMENTS)
    e2e = io.read_parquet(inputs.e2e, tables.E2E)
    traced = _traces(inputs.overheads, inputs.op_types)
    overhead, walks = from_traces(*traced) if traced else (None, None)
    pred = predict(layers, meas, e2e, config["device"], overhead=overhead, statistic=config["statistic"],
                   walks=walks)
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


def predict_unseen(config: Mapping, db_paths: dict, unseen_layer_paths, unseen_e2e_paths, out, out_tsv) -> pd.DataFrame:
    """The `predict_only` workloads predicted from the run's database (``db_paths``: `layers`, `measurements`,
    `e2e` paths; its cost model is saved beside them), each against its own end-to-end time: `predictions` rows
    of source `estimated`. A workload that cannot be predicted is logged and left out; the others go on."""
    from opcost.analysis.estimate import predict_workload
    from opcost.analysis.predict import references

    db = _read_db(db_paths)
    e2e = io.read_many(unseen_e2e_paths, tables.E2E)
    rows = []
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
                p = predict_workload(db, layers, trace_now=(model, config["predict_only"][model]), **ask)
            except OpcostError as e:
                log.warning("%s %s b%d: predicted without a trace of its own: %s", model, mode, batch, e)
                p = predict_workload(db, layers, **ask)
        except OpcostError as e:
            log.error("%s %s b%d: cannot predict: %s", model, mode, batch, e)
            continue
        ref = references(mine, config["device"], "isolated", config["statistic"])
        measured, method = ref.get((model, batch, mode), (None, None))
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
        log.info("%s %s b%d: predicted %.3f ms [%.3f, %.3f], %.0f%% estimated; measured %s", model, mode, batch,
                 p.predicted_s * 1e3, p.low_s * 1e3, p.high_s * 1e3, 100 * p.estimated_share,
                 f"{measured * 1e3:.3f} ms" if measured else "none")
    pred = tables.frame(tables.PREDICTIONS, rows)
    io.write_parquet(pred, out, tables.PREDICTIONS)
    io.write_text(pred.to_csv(sep="\t", index=False, float_format="%.6g"), out_tsv)
    return pred


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
    them, beside their measured steps (:func:`opcost.analysis.decode.curves`): the decode figure's input."""
    from opcost.analysis.decode import curves
    from opcost.database import read_db

    db = read_db(db_dir)
    return curves(db, db_dir, config["models"], config["statistic"], config["dtype"], device=config["device"],
                  threads=config["threads"], host=prediction_host(db["measurements"], db["e2e"], config))


def coplace(config: Mapping, model: str, mode: str, batch: int, out, out_summary, out_failures=None) -> None:
    """Simultaneous placement profiling of one workload (:mod:`opcost.measure.coplace`): measurements with ``source =
    coplace`` and a JSON summary (rounds, layers, placements covered, wall seconds, isolated-equivalent estimate).
    Skipped, with an empty table and the reason in the summary, for training or fewer than two usable tiers; see
    :func:`opcost.rule.guarded` for ``out_failures``."""
    from opcost.measure.coplace import profile_coplace
    from opcost.measure.placement import Settings as PlacementSettings
    from opcost.measure.placement import usable_tiers
    from opcost.measure.timing import TimingSettings
    from opcost.model.workload import workload_key

    def skip(why: str) -> None:
        io.write_parquet(tables.frame(tables.MEASUREMENTS, []), out, tables.MEASUREMENTS)
        io.write_json({"workload": workload_key(model, mode, int(batch)), "skipped": why, "rounds": 0}, out_summary)

    def body():
        placement = PlacementSettings.from_config(config["placement"])
        tiers, skipped = usable_tiers(placement, config["device"]) if placement.enabled else ([], {})
        why = None
        if mode != "inference":
            why = f"simultaneous placement profiling runs inference only, not {mode}"
        elif len(tiers) < 2:
            why = (f"{len(tiers)} usable placement tier(s) ({', '.join(t.name for t in tiers) or 'none'}): a "
                   "placement comparison needs two" + (f"; {'; '.join(skipped.values())}" if skipped else ""))
        if why is not None:
            log.warning("coplace %s %s b%s skipped: %s", model, mode, batch, why)
            skip(why)
            return
        wl = _workload(config, model, mode, batch)
        meas, summary = profile_coplace(wl, TimingSettings.from_config(config["insitu"]["timing"]),
                                        config["device"], placement)
        io.write_parquet(meas, out, tables.MEASUREMENTS)
        io.write_json({**summary, "skipped": None}, out_summary)
        log.info("%s %s b%s: %d placements of %d leaf-module calls in %d rounds, %.1f s (isolated estimate "
                 "%.1f s); %d placement mismatches", model, mode, batch, summary["placements"], summary["layers"],
                 summary["rounds"], summary["wall_s"], summary["isolated_estimate_s"],
                 summary["placement_mismatches"])

    prepare_process(config)
    guarded("coplace", model, mode, batch, out_failures,
             {out: tables.MEASUREMENTS, out_summary: lambda _: skip("failed: see results/failures.tsv")}, body)


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
