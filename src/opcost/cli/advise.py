"""`opcost advise`: where each tensor should live under a fast-memory budget."""
from __future__ import annotations

from opcost.cli.args import config_of, positive
from opcost.errors import OpcostError


def add(sub) -> None:
    """`opcost advise`."""
    ad = sub.add_parser("advise", help="where each tensor should live under a fast-memory budget: the placement of "
                                       "least predicted time (an integer program), beside greedy and first-touch")
    ad.add_argument("model", help="as for predict: a config model name (with --config), torchvision name, ...")
    ad.add_argument("--batch", type=positive, required=True)
    ad.add_argument("--mode", choices=["inference", "training"], default="inference")
    ad.add_argument("--budget", required=True, help="bytes on the fast tier: a size (2GiB, 512MB, bytes) or a share "
                                                    "of the placeable footprint (25%%)")
    ad.add_argument("--tiers", metavar="FAST,SLOW", help="the fast and the slow tier (default: the database's fast "
                                                         "tier and its only slower one)")
    ad.add_argument("--db", default="results/db")
    ad.add_argument("--config", help="config file whose `models` entry describes MODEL (inputs, kwargs, dtype)")
    for flag, kind in (("--host", str), ("--device", str), ("--threads", positive)):
        ad.add_argument(flag, type=kind, help=f"only measurements with this {flag[2:]}")
    ad.add_argument("--statistic", choices=["trimmed_mean", "median"], default="trimmed_mean")
    ad.add_argument("--out", help="also write the plan file (YAML, as the advise stage writes it) here")
    ad.add_argument("--json", action="store_true", help="print one JSON object")
    ad.set_defaults(handler=run)


def run(args) -> None:
    """`opcost advise`: the plans of one budget (opcost.analysis.advise), as text or one JSON object."""
    import json

    from opcost import database
    from opcost.analysis import advise, placement_problem
    from opcost.report import trust
    from opcost.report.advice import describe, summary

    placement_problem.parse_budget(args.budget)  # a malformed budget said before the model is built
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
    cfg = config_of(args) if args.config else None
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
