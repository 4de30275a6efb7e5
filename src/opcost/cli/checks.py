"""`opcost check-config` and `opcost check-models`: a config checked before a long run; `opcost schema`: the
data contract."""
from __future__ import annotations

import sys

from opcost.errors import OpcostError, Problems


def add(sub) -> None:
    """`opcost schema`, `opcost check-config` and `opcost check-models`."""
    sub.add_parser("schema", help="print the data-contract document (docs/data.md)").set_defaults(handler=schema)
    cc = sub.add_parser("check-config", help="validate a config file, build each model and run it once at each of "
                                             "its batch sizes (memory estimated where one would take too long)")
    cc.add_argument("config")
    cc.set_defaults(handler=check_config)
    cm = sub.add_parser("check-models", help="before a long run: build each workload of a config, run and extract "
                                            "one iteration, replay every operator configuration once")
    cm.add_argument("config")
    cm.add_argument("--models", nargs="+", help="only these config model names")
    cm.set_defaults(handler=check_models)


CHECK_BATCH_S = 10.0  # check-config runs a model at a batch size when its smallest batch says it takes no longer


def check_config(args) -> int:
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


def check_models(args) -> int:
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


def schema(args) -> None:
    from opcost.tables import markdown

    sys.stdout.write(markdown())
