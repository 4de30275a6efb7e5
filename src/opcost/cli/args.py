"""What the subcommands of ``opcost`` share: the config a command answers for, its workload mode, a batch or
thread count, the database a prediction reads."""
from __future__ import annotations

import argparse
import re
import sys

from opcost.errors import OpcostError


def config_of(args) -> dict:
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


def positive(text: str) -> int:
    """A batch size or thread count: an integer of at least 1 (argparse prints the one-line error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer of at least 1")
    return value


CONTEXT_HELP = "with --mode decode: the context length, tokens in the key/value cache (a step of one token each)"
PROMPT_HELP = "with --mode prefill or generate: the prompt's length in tokens (per sequence)"


def workload_mode(args) -> str:
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


def read_db(path) -> dict:
    """The database a prediction is answered from, each table it lacks that changes the answer (measured costs,
    end-to-end times, traced overheads) named on stderr first."""
    from opcost import database

    db = database.read_db(path)
    for line in database.missing_tables(path, ("measurements", "e2e", "overheads"), db):
        print(f"opcost: {line}", file=sys.stderr)
    return db
