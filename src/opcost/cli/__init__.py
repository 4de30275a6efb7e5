"""The ``opcost`` command: each stage runnable by hand, outside Snakemake; one module per subcommand (its parser's
``add`` and its handler), what they share in :mod:`opcost.cli.args`."""
from __future__ import annotations

import argparse
import re
import sys

from opcost.cli import advise, checks, db, extract, predict, sweep
from opcost.errors import OpcostError, from_os_error


SUBCOMMANDS = (extract, db, predict, advise, sweep, checks)  # in the order `opcost --help` lists them


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="opcost", description=__doc__.split(";")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for command in SUBCOMMANDS:
        command.add(sub)
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
