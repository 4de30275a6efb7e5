"""`opcost sweep suggest`: the sweep points where the database's cost model is least certain."""
from __future__ import annotations

from opcost.cli.args import positive


def add(sub) -> None:
    """`opcost sweep suggest`."""
    sw = sub.add_parser("sweep", help="operator sweeps").add_subparsers(dest="sweepcmd", required=True)
    sg = sw.add_parser("suggest", help="the sweep points where the database's cost model is least certain, as a "
                                       "`sweeps:` config fragment")
    sg.add_argument("config", help="config file whose `sweeps` grids are the candidates (each entry's `samples`, "
                                   "else -n, points are chosen from its whole grid)")
    sg.add_argument("--db", default="results/db")
    sg.add_argument("-n", type=positive, default=8, help="points per sweep entry without `samples` (default 8)")
    sg.add_argument("--mode", choices=["inference", "training"], default="inference")
    sg.add_argument("--host", help="only measurements of this host (a merged database may hold several)")
    sg.add_argument("--device", help="only measurements on this device (cpu, cuda)")
    sg.add_argument("--threads", type=positive, help="only measurements taken with this many threads")
    sg.set_defaults(handler=suggest)


def suggest(args) -> None:
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
