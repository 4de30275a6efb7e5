"""The ``opcost`` command: each stage runnable by hand, outside Snakemake."""
from __future__ import annotations

import argparse
import re
import sys

from opcost.errors import OpcostError, Problems, from_os_error


def _config(args) -> dict:
    """The config of a command: ``--config``'s, else one model named on the command line. A model given by its
    source (``timm:resnet50``, ``module:callable``), which a model name cannot hold, is named after it (letters,
    digits and ``_ . + -``; ``args.model`` then holds that name)."""
    from opcost import config

    given = {k: v for k in ("threads", "device") if (v := getattr(args, k, None))}  # --threads, --device win
    if not args.config and getattr(args, "model", None) and not config.MODEL_NAME.fullmatch(args.model):
        source, args.model = args.model, re.sub(r"[^A-Za-z0-9_.+-]", "_", args.model).lstrip("_.+-") or "model"
        return config.with_options({"models": {args.model: {"model": source}}}, given)
    cfg = config.load(args.config) if args.config else config.validate({"models": {args.model: {}}})
    if getattr(args, "model", None) and args.model not in cfg["models"]:
        cfg["models"][args.model] = {}
    return config.with_options(cfg, given) if given else cfg


def _positive(text: str) -> int:
    """A batch size or thread count: an integer of at least 1 (argparse prints the one-line error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer of at least 1")
    return value


_CONTEXT_HELP = "with --mode decode: the context length, tokens in the key/value cache (a step of one token each)"
_PROMPT_HELP = "with --mode prefill or generate: the prompt's length in tokens (per sequence)"


def _mode(args) -> str:
    """The workload mode of --mode, --context and --prompt: inference, training, decode<L> or prefill<P> (for
    --mode generate, its prefill's)."""
    from opcost.model.modes import decode_mode, prefill_mode

    if args.mode == "decode":
        if args.context is None:
            raise OpcostError("--mode decode", "needs --context L: the tokens in the key/value cache")
        return decode_mode(args.context)
    if args.context is not None:
        raise OpcostError(f"--context {args.context}", "is the context length of --mode decode")
    prompt = getattr(args, "prompt", None)
    if args.mode in ("prefill", "generate"):
        if prompt is None:
            raise OpcostError(f"--mode {args.mode}", "needs --prompt P: the prompt's tokens per sequence")
        if args.mode == "generate" and getattr(args, "new", None) is None:
            raise OpcostError("--mode generate", "needs --new N: the tokens generated per sequence")
        return prefill_mode(prompt)
    if prompt is not None:
        raise OpcostError(f"--prompt {prompt}", "is the prompt length of --mode prefill or generate")
    if getattr(args, "new", None) is not None:
        raise OpcostError(f"--new {args.new}", "is the tokens generated of --mode generate")
    return args.mode


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="opcost", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    for add in (_add_extract, _add_db, _add_predict, _add_advise, _add_sweep, _add_checks):
        add(sub)
    args = p.parse_args(_negative_budget(sys.argv[1:] if argv is None else list(argv)))
    try:
        return args.handler(args) or 0
    except OpcostError as e:
        print("\n".join(f"opcost: {line}" for line in str(e).splitlines()), file=sys.stderr)
        return 1
    except OSError as e:
        print(f"opcost: {from_os_error(e)}", file=sys.stderr)
        return 1


def _negative_budget(argv: list[str]) -> list[str]:
    """``--budget -5%`` as ``--budget=-5%``: argparse takes -5% for an option; its own check names the value."""
    at = [i + 1 for i, a in enumerate(argv[:-1]) if a == "--budget" and re.match(r"-[0-9.]", argv[i + 1])]
    return [f"--budget={a}" if i in at else a for i, a in enumerate(argv) if i + 1 not in at]


def _add_extract(sub) -> None:
    """`opcost extract`: a model workload's operator configurations to Parquet."""
    ex = sub.add_parser("extract", help="operator configurations of one model workload -> Parquet")
    ex.add_argument("model", help="config model name, torchvision name, built-in name or module:callable")
    ex.add_argument("--batch", type=_positive, default=1)
    ex.add_argument("--mode", choices=["inference", "training", "decode", "prefill"], default="inference")
    ex.add_argument("--context", type=_positive, help=_CONTEXT_HELP)
    ex.add_argument("--prompt", type=_positive, help=_PROMPT_HELP)
    ex.add_argument("--out", required=True, help="output .parquet (columns: docs/data.md, table `layers`)")
    ex.add_argument("--config", help="config file whose `models` entry describes MODEL (inputs, kwargs)")
    ex.add_argument("--device")
    ex.set_defaults(handler=_extract)


def _add_db(sub) -> None:
    """`opcost db merge` and `opcost db show`."""
    db = sub.add_parser("db", help="the Parquet database: merge, show").add_subparsers(dest="dbcmd", required=True)
    mg = db.add_parser("merge", help="merge databases from several machines or runs (idempotent)")
    mg.add_argument("inputs", nargs="+", help="database directories (e.g. results/db)")
    mg.add_argument("--out", required=True, help="a new or empty directory, or a database to merge into (its rows "
                                                 "are kept)")
    sh = db.add_parser("show", help="measurements, filtered")
    sh.add_argument("--db", default="results/db")
    sh.add_argument("--op", help="op_type (Conv2d, add_) or full op name")
    sh.add_argument("--device")
    sh.add_argument("--placement")
    sh.add_argument("--source", choices=["isolated", "insitu", "coplace"])
    sh.add_argument("--host")
    sh.add_argument("--mode", choices=["inference", "training"])
    sh.add_argument("--phase", choices=["forward", "backward"])
    sh.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="a parameter's value, e.g. kernel_size=[3,3] or groups=1 (repeatable)")
    sh.add_argument("--shape", help="an input's shape, e.g. 8,64,56,56")
    sh.add_argument("--statistic", choices=["trimmed_mean", "median"],
                    help="the per-call cost shown as cost_s (default: the one predictions use)")
    sh.add_argument("--csv", action="store_true", help="CSV on stdout instead of a table")
    mg.set_defaults(handler=_db_merge)
    sh.set_defaults(handler=_db_show)


def _add_predict(sub) -> None:
    """`opcost predict`."""
    pr = sub.add_parser("predict", help="predict any model's iteration from the database: measured costs where it "
                                        "holds the configuration, the cost model's estimates for the rest")
    pr.add_argument("model", help="a config model name (with --config), torchvision or built-in name, "
                                  "timm:<name>, hf:<architecture> or module:callable")
    pr.add_argument("--batch", type=_positive, required=True)
    pr.add_argument("--mode", choices=["inference", "training", "decode", "prefill", "generate"],
                    default="inference",
                    help="decode: one generation step (time per token, tokens/s, bytes read per step); prefill: "
                         "generate()'s first call; generate: Hugging Face generate() of --new tokens from a "
                         "--prompt (time to first token, per output token, total, tokens/s, the memory bound)")
    pr.add_argument("--context", type=_positive, help=_CONTEXT_HELP)
    pr.add_argument("--prompt", type=_positive, help=_PROMPT_HELP)
    pr.add_argument("--new", type=_positive, help="with --mode generate: the tokens generated per sequence")
    pr.add_argument("--db", default="results/db")
    pr.add_argument("--config", help="config file whose `models` entry describes MODEL (inputs, kwargs); a MODEL "
                                     "the database holds built otherwise (another size, dtype) is refused without it")
    pr.add_argument("--host", help="only measurements of this host (a merged database may hold several)")
    pr.add_argument("--device", help="only measurements on this device (cpu, cuda)")
    pr.add_argument("--threads", type=_positive, help="only measurements taken with this many threads")
    pr.add_argument("--run", help="a merged database's run (`run` column) whose end-to-end reference and measured "
                                  "costs to take (default: the run of the model's newest end-to-end time)")
    pr.add_argument("--statistic", choices=["trimmed_mean", "median"], default="trimmed_mean",
                    help="per-call statistic summed (and of the end-to-end time; default: %(default)s)")
    pr.add_argument("--tier", help="with the operators' tensors on this slower memory tier (config placement.tiers): "
                                   "each cost scaled by its slowdown measured there")
    pr.add_argument("--scenario", choices=["activations", "weights", "all"],
                    help="with --tier, which tensors are on it: the operators' inputs and outputs, the parameters, "
                         "or all (default: all where parameters were placed, else activations)")
    pr.add_argument("--no-trace", action="store_true",
                    help="for a workload the database never traced, take the overhead between operators from the "
                         "database's traces instead of a short trace of its own (seconds)")
    pr.add_argument("--json", action="store_true", help="print one JSON object")
    pr.set_defaults(handler=_print_prediction)


def _add_advise(sub) -> None:
    """`opcost advise`."""
    ad = sub.add_parser("advise", help="where each tensor should live under a fast-memory budget: the placement of "
                                       "least predicted time (an integer program), beside greedy and first-touch")
    ad.add_argument("model", help="as for predict: a config model name (with --config), torchvision name, ...")
    ad.add_argument("--batch", type=_positive, required=True)
    ad.add_argument("--mode", choices=["inference", "training"], default="inference")
    ad.add_argument("--budget", required=True, help="bytes on the fast tier: a size (2GiB, 512MB, bytes) or a share "
                                                    "of the placeable footprint (25%%)")
    ad.add_argument("--tiers", metavar="FAST,SLOW", help="the fast and the slow tier (default: the database's fast "
                                                         "tier and its only slower one)")
    ad.add_argument("--db", default="results/db")
    ad.add_argument("--config", help="config file whose `models` entry describes MODEL (inputs, kwargs, dtype)")
    for flag, kind in (("--host", str), ("--device", str), ("--threads", _positive)):
        ad.add_argument(flag, type=kind, help=f"only measurements with this {flag[2:]}")
    ad.add_argument("--statistic", choices=["trimmed_mean", "median"], default="trimmed_mean")
    ad.add_argument("--out", help="also write the plan file (YAML, as the advise stage writes it) here")
    ad.add_argument("--json", action="store_true", help="print one JSON object")
    ad.set_defaults(handler=_advise)


def _add_sweep(sub) -> None:
    """`opcost sweep suggest`."""
    sw = sub.add_parser("sweep", help="operator sweeps").add_subparsers(dest="sweepcmd", required=True)
    sg = sw.add_parser("suggest", help="the sweep points where the database's cost model is least certain, as a "
                                       "`sweeps:` config fragment")
    sg.add_argument("config", help="config file whose `sweeps` grids are the candidates (each entry's `samples`, "
                                   "else -n, points are chosen from its whole grid)")
    sg.add_argument("--db", default="results/db")
    sg.add_argument("-n", type=_positive, default=8, help="points per sweep entry without `samples` (default 8)")
    sg.add_argument("--mode", choices=["inference", "training"], default="inference")
    sg.add_argument("--host", help="only measurements of this host (a merged database may hold several)")
    sg.add_argument("--device", help="only measurements on this device (cpu, cuda)")
    sg.add_argument("--threads", type=_positive, help="only measurements taken with this many threads")
    sg.set_defaults(handler=_suggest_sweeps)


def _add_checks(sub) -> None:
    """`opcost schema`, `opcost check-config` and `opcost check-models`."""
    sub.add_parser("schema", help="print the data-contract document (docs/data.md)").set_defaults(handler=_schema)
    cc = sub.add_parser("check-config", help="validate a config file, build each model and run it once at each of "
                                             "its batch sizes (memory estimated where one would take too long)")
    cc.add_argument("config")
    cc.set_defaults(handler=_check_config)
    cm = sub.add_parser("check-models", help="before a long run: build each workload of a config, run and extract "
                                            "one iteration, replay every operator configuration once")
    cm.add_argument("config")
    cm.add_argument("--models", nargs="+", help="only these config model names")
    cm.set_defaults(handler=_check_models)


def _extract(args) -> None:
    if not str(args.out).endswith(".parquet"):
        raise OpcostError(f"--out {args.out}", "the layers table is written as Parquet: give a name ending in .parquet")
    from opcost import io, stages, tables
    from opcost.rule import setup_logging

    setup_logging()
    stages.extract(_config(args), args.model, _mode(args), args.batch, args.out)
    df = io.read_parquet(args.out, tables.LAYERS)
    summary = df.groupby(["scope", "op_type"])["count"].sum()
    print(summary.to_string())


def _db_merge(args) -> None:
    from opcost import database
    from opcost.analysis.estimate import refit

    merged = database.merge(args.inputs, args.out)
    print(", ".join(f"{k}: {len(v)} rows" for k, v in merged.items()))
    for key, held in refit(args.out).items():  # the cost model beside the database, refitted
        errs = ", ".join(f"{m} {v['median_abs_error']:.1%}" for m, v in held.items() if isinstance(v, dict))
        print(f"cost model {key}: " + (f"{held['chosen']}; held-out median |error| per configuration "
                                       f"{errs} over {held['configurations']} configurations" if errs
                                       else "fitted (too few configurations to cross-validate)"))


def _db_show(args) -> None:
    from opcost import database

    params = {}
    for item in args.param:
        k, eq, v = item.partition("=")
        if not k.strip() or not eq:
            raise OpcostError(f"--param {item}", "expected NAME=VALUE, e.g. kernel_size=[3,3]")
        params[k.strip()] = v
    where = database.Filter(op=args.op, device=args.device, placement=args.placement,
                            source=args.source, host=args.host, mode=args.mode, phase=args.phase,
                            params=params, shape=args.shape)
    db = database.read_db(args.db)
    table = database.show(db, where, statistic=args.statistic)
    if args.csv:  # the header alone where nothing matches, and why on stderr: a pipe reads a table either way
        sys.stdout.write(table.to_csv(index=False))
        if not len(table):
            print(f"opcost: {database.why_none(db, where)}", file=sys.stderr)
    else:
        print(table.to_string(index=False) if len(table) else database.why_none(db, where))


def _schema(args) -> None:
    from opcost.tables import markdown

    sys.stdout.write(markdown())


CHECK_BATCH_S = 10.0  # check-config runs a model at a batch size when its smallest batch says it takes no longer


def _check_config(args) -> int:
    """`opcost check-config`: the config's keys and models checked as a run checks them before its first job
    (opcost.preflight), then each model built and run once at each of its batch sizes (those its smallest says would
    take over :data:`CHECK_BATCH_S` are left to the memory check); every problem listed, one line each (exit 1 when
    any)."""
    import time

    from opcost import config, host_check, preflight
    from opcost.model.sources import load_model
    from opcost.model.workload import make_workload

    cfg = config.load(args.config)
    for line in host_check.tier_warnings(cfg):
        print(f"opcost: warning: {line}", file=sys.stderr)
    problems = preflight.problems(cfg)
    if any(line.startswith("config: device") for line in problems):  # no model can be built there
        raise Problems(problems)

    def named(model):  # a problem already found for this model: not built again
        return any(line.startswith((f"model {model}:", f"config: models.{model}.")) for line in problems)

    batches = {}  # model -> {batch: a mode it runs in}, in config order
    for model, mode, batch in config.workloads(cfg) + config.workloads(cfg, "predict_only"):
        batches.setdefault(model, {}).setdefault(batch, mode)
    skipped = []
    for model, modes in batches.items():
        if named(model):
            continue
        sizes = sorted(modes)
        mode = modes[sizes[0]]  # the smallest batch's mode, for every batch
        loaded, per_sample_s = None, 0.0  # the smallest batch's time per sample, once it ran
        for batch in sizes:  # each batch size: a forward that fails only at batch > 1 is found here
            if per_sample_s * batch > CHECK_BATCH_S:
                skipped.append(f"{model} b{batch}")  # too slow to run here: its memory was checked arithmetically
                continue
            try:
                loaded = loaded or load_model(model, cfg["models"][model], cfg["device"], cfg["dtype"])
                t0 = time.perf_counter()
                make_workload(loaded, batch, mode)
                per_sample_s = per_sample_s or (time.perf_counter() - t0) / batch
            except OpcostError as e:
                problems.append(f"{e} (at batch {batch})" if batch != sizes[0] else str(e))
                break
    if problems:
        raise Problems(problems)
    but = (f" but {', '.join(skipped)} (over {CHECK_BATCH_S:.0f} s each: their memory checked, not run)" if skipped
           else "")
    print(f"{args.config}: ok, {len(config.workloads(cfg))} workloads; every model builds and runs at each batch "
          f"size{but}")
    return 0


def _check_models(args) -> int:
    """One line per workload of the config (ok, or the first failure); exit 1 when any failed."""
    import torch

    from opcost import config
    from opcost.check import check_workload

    cfg = config.load(args.config)
    unknown = sorted(set(args.models or ()) - set(cfg["models"]))
    if unknown:
        raise OpcostError(f"--models {' '.join(unknown)}", f"not a model of {args.config} (it has "
                                                           f"{', '.join(sorted(cfg['models']))})")
    torch.set_num_threads(int(cfg["threads"]))
    failed = 0
    for model, mode, batch in config.workloads(cfg):
        if args.models and model not in args.models:
            continue
        res = check_workload(model, cfg["models"][model], batch, mode, cfg["device"], cfg["dtype"])
        failed += not res.ok
        print(f"{res.workload}: " + (f"ok, {res.configs} configurations, {res.calls} calls" if res.ok else
                                     f"FAILED {res.first_failure()}" + (
                                         f" (and {len(res.replay_failures) - 1} more configurations)"
                                         if len(res.replay_failures) > 1 else "")), flush=True)
    return 1 if failed else 0


def _suggest_sweeps(args) -> None:
    """`opcost sweep suggest`: per sweep entry of the config, its least certain points (opcost.analysis.sampling)."""
    import json

    from opcost import config, database
    from opcost.analysis import estimate
    from opcost.analysis.predict import DEFAULT_STATISTIC, STATISTICS
    from opcost.analysis.sampling import candidate_layers, choose
    from opcost.analysis.training import load_or_fit
    from opcost.errors import OpcostError

    cfg = config.load(args.config)
    if not cfg.get("sweeps"):
        raise OpcostError(f"config {args.config}", "has no `sweeps` entry to choose points from")
    db = database.read_db(args.db)
    used, picked = estimate.conditions(db["measurements"], host=args.host, device=args.device, threads=args.threads)
    model = load_or_fit(args.db, estimate.condition_key(picked), db["layers"], used, STATISTICS[DEFAULT_STATISTIC],
                        db.get("configs"), estimate.alone_rows(db["measurements"], used))
    if model is None:
        raise OpcostError(f"database {args.db}", "too few measured configurations to fit a cost model")
    print(f"# opcost sweep suggest: where the cost model of {args.db} ({estimate.condition_key(picked)}) is least "
          "certain")
    print("sweeps:")
    for sweep in cfg["sweeps"]:
        cands = candidate_layers(sweep, cfg["batch_sizes"], args.mode)
        chosen = choose(model, cands, int(sweep.get("samples") or args.n), set(used["config_id"]))
        if not chosen:  # an entry without points is no sweep: said, and left out
            print(f"  # {sweep['op']}: every candidate point of this sweep is measured already: nothing to add")
            continue
        points = ", ".join("{" + ", ".join(f"{k}: {v}" for k, v in json.loads(p).items()) + "}" for p in chosen)
        extra = "".join(f", {k}: {sweep[k]}" for k in ("depth",) if k in sweep)
        print(f"  - {{op: {sweep['op']}{extra}, points: [{points}]}}")


def _read_db(path) -> dict:
    """The database a prediction is answered from, each table it lacks that changes the answer (measured costs,
    end-to-end times, traced overheads) named on stderr first."""
    from opcost import database

    db = database.read_db(path)
    for line in database.missing_tables(path, ("measurements", "e2e", "overheads")):
        print(f"opcost: {line}", file=sys.stderr)
    return db


def _print_prediction(args) -> None:
    import json

    from opcost.analysis import estimate
    from opcost.report import trust

    db = _read_db(args.db)
    spec, dtype = {}, None  # with a config, its entry and dtype: a workload the database holds is checked against it
    if args.config:
        cfg = _config(args)
        spec, dtype = (cfg.get("models") or {}).get(args.model) or {}, cfg["dtype"]
    if args.scenario and not args.tier:
        raise OpcostError("--scenario", "says which tensors are on a slower tier: give the tier with --tier")
    mode = _mode(args)
    if args.mode == "generate":  # a prefill and its steps: opcost.analysis.generate
        if args.tier:
            raise OpcostError("--tier", "is a question of one workload: ask it of --mode prefill or decode")
        from opcost.analysis import generate
        from opcost.report.generate import describe

        g = generate.predict(db, generate.Question(args.model, args.batch, args.prompt, args.new), spec, args.db,
                             args.statistic, trace_now=not args.no_trace, dtype=dtype, host=args.host,
                             device=args.device, threads=args.threads)
        expect = trust.expect("generate")
        print(json.dumps({**g, "expect": expect}) if args.json else f"{describe(g)}\n{expect}")
        return
    layers = estimate.workload_layers(db, args.model, args.batch, mode, spec, dtype)
    p = estimate.predict_workload(db, layers, args.db, args.statistic, host=args.host, device=args.device,
                                  threads=args.threads, run=args.run,
                                  on_tier=estimate.OnTier(args.tier, args.scenario) if args.tier else None,
                                  trace_now=None if args.no_trace else (args.model, spec))
    types = layers["op_type"].astype(str)
    no_decode = mode.startswith("decode") and not db["layers"]["mode"].astype(str).str.startswith("decode").any()
    expect = trust.expect("decode_unmeasured" if no_decode else trust.kind(
        p.conditions.get("device") or args.device or "cpu", mode, p.estimated_share, types.str.contains("Conv").any(),
        args.tier, _beyond_measured(db, args.model, mode),
        attention=types.str.contains("attention|softmax", case=False).any()))
    if args.mode == "decode":  # per token: opcost.analysis.decode
        from opcost.analysis.decode import summary
        from opcost.report.decode import describe

        step = summary(p, layers)
        print(json.dumps({**p.as_dict(), **step, "expect": expect}) if args.json else f"{describe(step)}\n{expect}")
        return
    # without a config, a workload the database holds is answered as held, which another entry may not build
    held = dtype is None and len(estimate.of_workload(db["layers"], args.model, args.batch, mode)) > 0
    note = (f"{args.model}: the variant the database holds (as its run's config built it); --config with your config "
            "file checks that it is yours") if held else None
    if args.json:
        print(json.dumps({**p.as_dict(), "expect": expect, "variant": note}))
        return
    from opcost.report.prediction import describe

    print("\n".join([describe(p, args.model, args.statistic), *([note] if note else []), expect]))


def _beyond_measured(db: dict, model: str, mode: str) -> float | None:
    """A decode step's context over the longest its model was measured at in the database (None: not a decode step,
    or none measured)."""
    from opcost.model.modes import decode_context

    asked = decode_context(mode)
    held = [c for c in map(decode_context, set(db["layers"].loc[db["layers"]["model"] == model, "mode"])) if c]
    return asked / max(held) if asked and held else None


def _advise(args) -> None:
    """`opcost advise`: the plans of one budget (opcost.analysis.advise), as text or one JSON object."""
    import json

    from opcost import database
    from opcost.analysis import advise, placement_problem
    from opcost.report import trust
    from opcost.report.advice import describe, summary

    tiers = tuple(t.strip() for t in args.tiers.split(",")) if args.tiers else None
    if tiers is not None and (len(tiers) != 2 or not all(tiers)):
        raise OpcostError(f"--tiers {args.tiers}", "expected two tier names, FAST,SLOW (e.g. dram,cxl)")
    if args.out:
        from pathlib import Path

        out = Path(args.out).resolve()
        if out.suffix not in (".yaml", ".yml"):
            raise OpcostError(f"--out {args.out}", "the plan file is YAML: give a path ending in .yaml")
        if out.is_relative_to(Path(args.db).resolve()):
            raise OpcostError(f"--out {args.out}", f"lies inside the database {args.db}, which advise only reads: "
                                                   "write the plan file elsewhere")
    cfg = _config(args) if args.config else None
    conds = {k: getattr(args, k) for k in ("host", "device", "threads") if getattr(args, k) is not None}
    settings = placement_problem.AdviseSettings(tiers=tiers, statistic=args.statistic, conditions=conds, db_dir=args.db)
    problem = advise.for_workload(database.read_db(args.db), (args.model, args.batch, args.mode),
                                  cfg["models"].get(args.model) if cfg else {}, cfg["dtype"] if cfg else None,
                                  settings, check=cfg is not None)
    made = placement_problem.plans(problem, placement_problem.budget_bytes(args.budget, problem), settings)
    if args.out:
        advise.write_advice(advise.advise(problem, [args.budget], settings), args.out)
    expect = trust.expect("tier")
    print(json.dumps({**summary(problem, made), "expect": expect}) if args.json
          else f"{describe(problem, made)}\n{expect}")


if __name__ == "__main__":
    sys.exit(main())
