"""The ``opcost`` command: each stage runnable by hand, outside Snakemake."""
from __future__ import annotations

import argparse
import sys

from .errors import OpcostError


def _config(args) -> dict:
    from . import config

    cfg = config.load(args.config) if args.config else config.validate({"models": {args.model: {}}})
    if getattr(args, "model", None) and args.model not in cfg["models"]:
        cfg["models"][args.model] = {}
    if getattr(args, "threads", None):
        cfg["threads"] = args.threads
    if getattr(args, "device", None):
        cfg["device"] = args.device
    return cfg


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="opcost", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    ex = sub.add_parser("extract", help="operator configurations of one model workload -> Parquet")
    ex.add_argument("model", help="config model name, torchvision name, built-in name or module:callable")
    ex.add_argument("--batch", type=int, default=1)
    ex.add_argument("--mode", choices=["inference", "training"], default="inference")
    ex.add_argument("--out", required=True, help="output .parquet (columns: docs/data.md, table `layers`)")
    ex.add_argument("--config", help="config file whose `models` entry describes MODEL (inputs, kwargs)")
    ex.add_argument("--device")

    sub.add_parser("schema", help="print the data-contract document (docs/data.md)")
    sub.add_parser("check-config", help="validate a config file").add_argument("config")

    args = p.parse_args(argv)
    try:
        if args.cmd == "extract":
            from . import stages

            stages.setup_logging()
            df = stages.extract(_config(args), args.model, args.mode, args.batch, args.out)
            summary = df.groupby(["scope", "op_type"])["count"].sum()
            print(summary.to_string())
        elif args.cmd == "schema":
            from .tables import markdown

            sys.stdout.write(markdown())
        elif args.cmd == "check-config":
            from . import config

            cfg = config.load(args.config)
            print(f"{args.config}: ok, {len(config.workloads(cfg))} workloads")
    except OpcostError as e:
        print(f"opcost: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
