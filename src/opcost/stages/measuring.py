"""The measuring stages: extraction, the catalogue, isolated profiling, end-to-end and in-situ timing, traces and
co-placement: each what one Snakemake rule's script calls (see :mod:`opcost.stages`)."""
from __future__ import annotations

import json
import logging
import socket
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from opcost import io, tables, trace_tables
from opcost.database import catalog
from opcost.errors import OpcostError
from opcost.measure.job import JobEnergy, prepare_process
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
    ``chunk``; resumes the journal of its interrupted run. Unless the job is ``forced`` (a forced rerun measures
    afresh), a completed run's journal is resumed too: reused whole when it holds every configuration of the chunk
    (its outputs were deleted, or its catalogue made again the same), its configurations still in the chunk kept
    when a workload was added (only the new ones measured). ``out_e2e``: the model iterations timed inside
    its rotations (`e2e` rows of method `rotation`; empty when none ran)."""
    from opcost.journal import for_job, profile_job, settings_key
    from opcost.measure.engine import engine_call_s, needs_engine, without_engine_calls
    from opcost.measure.profile import ProfileSettings, profile_configs
    from opcost.measure.profiling import METHOD_VERSION

    job = profile_job(iteration, chunk)
    prepare_process(config)
    configs = io.read_parquet(configs_path, tables.CONFIGS)
    previous = io.read_json(previous_evaluation)
    mine, context = _chunk_configs(config, configs, iteration, int(chunk), previous)
    profiling = ProfileSettings.from_config(config)
    key = settings_key(METHOD_VERSION, profiling.timing, config["device"], config["dtype"], config["threads"],
                       profiling.remeasure, profiling.placement, profiling.cache, config["affinity"],
                       profiling.rotation_size, profiling.order, profiling.visits)
    journal = for_job(journal_dir, job, key, keep_completed=True)
    _reuse_or_discard(journal, set(mine["config_id"]), forced)
    # an interrupted run's configurations still in this chunk (a catalogue that changed since keeps the rest), and
    # the model iterations of its rotations: the reference their configurations are checked against
    done_rows, done_samples = journal.load(keep_ids=set(mine["config_id"]))
    done_e2e, done_e2e_samples = _current_e2e(*journal.load_e2e(), mine, journal.config_ids())
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


def _chunk_configs(config: Mapping, configs: pd.DataFrame, iteration: int, chunk: int,
                   previous: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the configurations profile job (``iteration``, ``chunk``) measures, the rotation context: every other
    configuration): those whose op type is new in the loop's iteration (:func:`opcost.analysis.loop.new_op_types`)
    and which hash to the chunk; the sweep points' configurations all in the first iteration, whatever their type."""
    from opcost.analysis.loop import ALL, LoopSettings, new_op_types
    from opcost.config import is_sweep
    from opcost.measure.profiling import chunk_of

    loop = LoopSettings(initial_op_types=tuple((config.get("loop") or {}).get("initial_op_types") or ()))
    types = new_op_types(iteration, loop, sorted(set(configs["op_type"])), previous)
    absent = sorted(set(loop.initial_op_types) - set(configs["op_type"]) - {ALL})
    if iteration == 0 and absent:
        log.warning("config: loop.initial_op_types: no workload has operator type(s) %s", ", ".join(absent))
    chunks = int(config["profile"]["chunks"])
    in_chunk = configs["config_id"].map(lambda c: chunk_of(c, chunks)) == chunk
    swept = configs["models"].map(lambda ms: any(is_sweep(config["models"].get(m, {})) for m in json.loads(ms)))
    chosen = swept if iteration == 0 else pd.Series(False, index=configs.index)
    mine = configs[((configs["op_type"].isin(types) & ~swept) | chosen) & in_chunk]
    # rotation context: every other configuration (rotations are per workload: the workload's other operators, of
    # every type and chunk, run untimed between the timed ones, as in the model)
    context = configs[~configs["config_id"].isin(mine["config_id"])]
    log.info("iteration %d, chunk %d/%d: %d of %d configurations (op types: %s)", iteration, chunk, chunks,
             len(mine), len(configs), ", ".join(types))
    return mine, context


def _current_e2e(rows: list[dict], samples: list[dict], mine: pd.DataFrame, held: set) -> tuple[list, list]:
    """The journal's model iterations (`rotation` rows and their samples) of workloads that are as they were. Where
    the journal holds configurations no longer in this chunk (``held`` against ``mine``, `configs` rows: the
    catalogue changed since), a workload with configurations here that the journal lacks changed too (its model's
    entry, another size) and its iterations, timed as another model, are left out; else (an interrupted run, a
    workload added) every one is kept."""
    from opcost.model.workload import workload_key

    if held <= set(mine["config_id"]):
        return rows, samples
    per: dict[str, set] = {}
    for cid, calls in zip(mine["config_id"], mine["workloads"]):
        for key in json.loads(calls or "{}"):
            per.setdefault(key, set()).add(cid)
    same = {key for key, ids in per.items() if ids <= held}
    keep = [r for r in rows if workload_key(r["model"], r["mode"], r["batch"]) in same]
    dropped = {workload_key(r["model"], r["mode"], r["batch"]) for r in rows} - same
    if dropped:
        log.info("journal: the model iterations of %s left out: the workload changed since they were timed",
                 ", ".join(sorted(dropped)))
    return keep, [s for s in samples if s.get("key") in same]


def _reuse_or_discard(journal, mine: set, forced: bool) -> None:
    """A completed run's journal, unless the job is ``forced`` (then discarded: measured afresh): reused whole when
    it holds every configuration of ``mine``, else resumed (a workload added since: the configurations it holds
    that are still in the chunk are kept, at the same settings, and only the new ones measured)."""
    if not journal.completed():
        return
    if forced:
        journal.discard("of a run that completed, forced to run again")
        return
    held = journal.config_ids()
    if mine <= held:  # its outputs deleted or damaged, or made again upstream, the same configurations
        log.info("journal %s: of a completed run of the same configurations and settings: reused whole (a run "
                 "forced with -R on this job's outputs measures afresh)", journal.path)
    else:
        log.info("journal %s: of a completed run at the same settings: its %d configurations still in this chunk "
                 "kept, the %d new ones measured (a run forced with -R on this job's outputs measures afresh)",
                 journal.path, len(mine & held), len(mine - held))


def e2e(config: Mapping, model: str, mode: str, batch: int, out, out_samples, out_failures=None) -> None:
    from opcost.measure import plain
    from opcost.measure.e2e import measure_e2e
    from opcost.measure.timing import TimingSettings

    def body():
        wl = _workload(config, model, mode, batch)
        energy = JobEnergy(config)
        settings = TimingSettings.from_config(config["e2e"]["timing"])
        control = getattr(config, "controls", {}).get(mode)  # a `predict_only` model's: its check is the time in
        # turn with them, the dedicated one half a second's glance
        row, samples = measure_e2e(wl, settings if control is None else settings.in_turn(), config["device"], energy)
        energy.close()
        log.info("%s %s b%s: %.3f ms per iteration (n=%d)", model, mode, batch, row["median_s"].iloc[0] * 1e3,
                 row["n"].iloc[0])
        warned = []
        if control is not None:
            try:  # its time in the database's minutes
                row, samples = _with_control(config, wl, control, row, samples)
            except Exception as e:  # the dedicated timing stands: a warning, not a failure
                log.warning("%s %s b%s: not timed with its controls: %s", model, mode, batch, e)
                warned.append({"config_id": None, "op_type": None, "kind": "warning",
                               "reason": f"model {model}: not timed with its controls: {e}"})
        # as a user's own script runs it, in turn with this process (a `predict_only` model's time is only checked)
        if config["e2e"].get("plain", True) and not getattr(config, "never_profiled", False):
            try:
                p_row, p_samples = plain.time_plain(model, config["models"][model], batch, mode, config, settings,
                                                    wl.step, int(row["calls_per_sample"].iloc[0]))
            except Exception as e:  # the dedicated timing stands: a warning, not a failure
                log.warning("%s %s b%s: %s", model, mode, batch, e)
                warned.append({"config_id": None, "op_type": None, "reason": f"model {model}: {e}",
                               "kind": "warning"})
            else:
                log.info("%s %s b%s: %.3f ms per iteration in a plain process (%s), %+.1f%% against this one's "
                         "blocks timed in turn (n=%d)", model, mode, batch, p_row["median_s"].iloc[0] * 1e3,
                         plain.CONDITIONS, (p_row["vs_opcost"].iloc[0] - 1) * 100, p_row["n"].iloc[0])
                row = pd.concat([row, p_row], ignore_index=True)
                samples = pd.concat([samples, p_samples], ignore_index=True)
        io.write_parquet(samples, out_samples, tables.SAMPLES)
        io.write_parquet(row, out, tables.E2E)
        return warned

    prepare_process(config)
    guarded("e2e", model, mode, batch, out_failures, {out: tables.E2E, out_samples: tables.SAMPLES}, body)


def _with_control(config: Mapping, wl, controls: list, row: pd.DataFrame, samples: pd.DataFrame):
    """``row`` and ``samples`` of a never-profiled workload's dedicated timing, with those of ``wl`` timed in turn
    with its ``controls`` ([[model, entry, batch], ...]; :mod:`opcost.measure.control`) added; a control that
    cannot be built is left out with a warning (raises where none can)."""
    from opcost.measure.control import time_with_control
    from opcost.measure.timing import TimingSettings

    built = []
    for name, entry, batch in controls:
        try:
            built.append(_workload(config, name, wl.mode, batch, entry))
        except Exception as e:  # a control that fails is the control's failure, recorded in its own jobs
            log.warning("%s %s b%s: control %s left out: %s", wl.model.name, wl.mode, wl.batch, name, e)
    if not built:
        raise OpcostError(f"model {wl.model.name}", "none of its controls could be built")
    settings = TimingSettings.from_config(config["e2e"]["timing"]).in_turn()
    c_rows, c_samples = time_with_control(wl, built, settings, config["device"])
    log.info("%s %s b%s: %.3f ms per iteration in turn with %s", wl.model.name, wl.mode, wl.batch,
             c_rows["median_s"].iloc[0] * 1e3, ", ".join(f"{c} ({r:.3f}x its time)" for c, r in
                                                           zip(c_rows["control"], c_rows["vs_control"])))
    return pd.concat([row, c_rows], ignore_index=True), pd.concat([samples, c_samples], ignore_index=True)


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
    from opcost.measure.profiling import matches_all
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


def alone(config: Mapping, model: str, mode: str, batch: int, layers_path, out, out_samples,
          out_failures=None, journal_dir="results/journal", forced: bool = True) -> None:
    """The workload's configurations (its extracted ``layers_path``) timed in one rotation in model order, then each
    in a rotation of its own (:mod:`opcost.measure.alone`): `measurements` rows of the sources in_order and alone.
    Unless the job is ``forced``, the completed journal of its last run at the same settings and configurations
    serves instead (its layers file made again the same, its outputs deleted: nothing is timed again)."""
    from opcost.journal import for_job, job_of, settings_key
    from opcost.measure.alone import profile_alone
    from opcost.measure.profile import ProfileSettings
    from opcost.measure.profiling import METHOD_VERSION

    def body():
        configs = catalog(io.read_parquet(layers_path, tables.LAYERS))
        settings = ProfileSettings.from_config({"profile": config["profile"], "device": config["device"],
                                                "placement": {}})  # the default placement only
        key = settings_key(METHOD_VERSION, settings, config["device"], config["dtype"], config["threads"],
                           config["affinity"])
        journal = for_job(journal_dir, job_of("alone", {"model": model, "mode": mode, "batch": batch}), key,
                          keep_completed=True)
        if not forced and journal.completed() and journal.config_ids() == set(configs["config_id"]):
            log.info("journal %s: of a completed run of the same configurations and settings: reused whole (a run "
                     "forced with -R on this job's outputs measures afresh)", journal.path)
            rows, smp = journal.load()
            meas, samples = tables.frame(tables.MEASUREMENTS, rows), tables.frame(tables.SAMPLES, smp)
        else:
            if journal.path.exists():
                journal.discard("of another run" + (", forced to run again" if forced else ""))
            meas, samples = profile_alone(configs, config["models"], config["device"], config["dtype"], settings)
            by = ["config_id", "source", "placement", "phase"]
            of_row = {k: g for k, g in samples.groupby(["key", *by[1:]], sort=False)} if len(samples) else {}
            for row in meas.to_dict("records"):  # one entry per row, in order: reused, the table is the same
                smp = of_row.get(tuple(row[c] for c in by))
                journal.append([row], [] if smp is None else smp.to_dict("records"))
        io.write_parquet(tables.frame(tables.SAMPLES, samples.to_dict("records")), out_samples, tables.SAMPLES)
        io.write_parquet(tables.frame(tables.MEASUREMENTS, meas.to_dict("records")), out, tables.MEASUREMENTS)
        journal.complete()
        log.info("%s %s b%s: %d configurations timed in model order and alone", model, mode, batch,
                 meas["config_id"].nunique() if len(meas) else 0)

    prepare_process(config)
    guarded("alone", model, mode, batch, out_failures, {out: tables.MEASUREMENTS, out_samples: tables.SAMPLES}, body)


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
    from opcost.analysis.overhead import trace_prediction
    from opcost.analysis.tracing import trace_workload
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
            io.write_parquet(traced.parts[f"trace_{part}"], out_tables[part],
                             getattr(trace_tables, f"TRACE_{part.upper()}"))
        check = trace_prediction(tt)
        log.info("%s %s b%s: %d traced iterations, median %.3f ms; top-level ops' %s time %.3f ms (%+.1f%%); "
                 "with modelled gaps %.3f ms (%+.1f%%)", model, mode, batch, tt.n_iterations,
                 check["measured_s"] * 1e3, "device" if tt.has_device else "CPU",
                 check["plain_s"] * 1e3, check["plain_error"] * 100, check["predicted_s"] * 1e3,
                 check["error"] * 100)
        return [{"config_id": cid, "op_type": op, "reason": f"left out of the replayed iterations: {why}"}
                for cid, (op, why) in left_out.items()]

    empty = {out_tables[p]: getattr(trace_tables, f"TRACE_{p.upper()}") for p in TRACE_PARTS}
    prepare_process(config)
    guarded("trace", model, mode, batch, out_failures, {out_trace: write_empty, **empty}, body)


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
