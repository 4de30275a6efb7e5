"""`opcost extract`: a model workload's operator configurations to Parquet."""
from __future__ import annotations

from opcost.cli.args import CONTEXT_HELP, config_of, positive, workload_mode
from opcost.errors import OpcostError


def add(sub) -> None:
    """`opcost extract`: a model workload's operator configurations to Parquet."""
    ex = sub.add_parser("extract", help="operator configurations of one model workload -> Parquet")
    ex.add_argument("model", help="config model name, torchvision name, built-in name or module:callable")
    ex.add_argument("--batch", type=positive, default=1)
    ex.add_argument("--mode", choices=["inference", "training", "decode", "prefill"], default="inference")
    ex.add_argument("--context", type=positive, help=CONTEXT_HELP)
    ex.add_argument("--prompt", type=positive, help="with --mode prefill: the prompt's length in tokens (per sequence)")
    ex.add_argument("--out", required=True, help="output .parquet (columns: docs/data.md, table `layers`)")
    ex.add_argument("--config", help="config file whose `models` entry describes MODEL (inputs, kwargs)")
    ex.add_argument("--device")
    ex.set_defaults(handler=run)


def run(args) -> None:
    if not str(args.out).endswith(".parquet"):
        raise OpcostError(f"--out {args.out}", "the layers table is written as Parquet: give a name ending in .parquet")
    from opcost import io, stages, tables
    from opcost.rule import setup_logging

    setup_logging()
    stages.extract(config_of(args), args.model, workload_mode(args), args.batch, args.out)
    df = io.read_parquet(args.out, tables.LAYERS)
    summary = df.groupby(["scope", "op_type"])["count"].sum()
    print(summary.to_string())
