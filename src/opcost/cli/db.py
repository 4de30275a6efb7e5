"""`opcost db merge` and `opcost db show`: the Parquet database."""
from __future__ import annotations

import sys

from opcost.errors import OpcostError


def add(sub) -> None:
    """`opcost db merge`, `opcost db show` and `opcost db runs`."""
    db = sub.add_parser("db", help="the Parquet database: merge, show, runs")
    db = db.add_subparsers(dest="dbcmd", required=True)
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
    rs = db.add_parser("runs", help="the runs and hosts a database holds: when, on what, how much")
    rs.add_argument("--db", default="results/db")
    mg.set_defaults(handler=merge)
    sh.set_defaults(handler=show)
    rs.set_defaults(handler=list_runs)


def merge(args) -> None:
    from opcost import database
    from opcost.analysis.estimate import refit

    merged = database.merge(args.inputs, args.out)
    for line in (ln for path in dict.fromkeys(args.inputs) for ln in database.missing_tables(path)):
        print(f"opcost: warning: {line}", file=sys.stderr)  # merged as empty: what an answer from the rest lacks
    print(", ".join(f"{k}: {len(v)} rows" for k, v in merged.items()))
    for key, held in refit(args.out).items():  # the cost model beside the database, refitted
        errs = ", ".join(f"{m} {v['median_abs_error']:.1%}" for m, v in held.items() if isinstance(v, dict))
        print(f"cost model {key}: " + (f"{held['chosen']}; held-out median |error| per configuration "
                                       f"{errs} over {held['configurations']} configurations" if errs
                                       else "fitted (too few configurations to cross-validate)"))


def show(args) -> None:
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


def list_runs(args) -> None:
    from opcost import database

    table = database.runs_table(database.read_db(args.db))
    print(table.to_string(index=False) if len(table) else f"{args.db}: no measurement and no end-to-end time")
