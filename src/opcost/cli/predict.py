"""`opcost predict`: any model's iteration, decode step or generate() from the database."""
from __future__ import annotations

from opcost.cli.args import CONTEXT_HELP, PROMPT_HELP, config_of, positive, read_db, workload_mode
from opcost.errors import OpcostError


def add(sub) -> None:
    """`opcost predict`."""
    pr = sub.add_parser("predict", help="predict any model's iteration from the database: measured costs where it "
                                        "holds the configuration, the cost model's estimates for the rest")
    pr.add_argument("model", help="a config model name (with --config), torchvision or built-in name, "
                                  "timm:<name>, hf:<architecture> or module:callable")
    pr.add_argument("--batch", type=positive, required=True)
    pr.add_argument("--mode", choices=["inference", "training", "decode", "prefill", "generate"],
                    default="inference",
                    help="decode: one generation step (time per token, tokens/s, bytes read per step); prefill: "
                         "generate()'s first call; generate: Hugging Face generate() of --new tokens from a "
                         "--prompt (time to first token, per output token, total, tokens/s, the memory bound)")
    pr.add_argument("--context", type=positive, help=CONTEXT_HELP)
    pr.add_argument("--prompt", type=positive, help=PROMPT_HELP)
    pr.add_argument("--new", type=positive, help="with --mode generate: the tokens generated per sequence")
    pr.add_argument("--db", default="results/db")
    pr.add_argument("--config", help="config file whose `models` entry describes MODEL (inputs, kwargs); a MODEL "
                                     "the database holds built otherwise (another size, dtype) is refused without it")
    pr.add_argument("--host", help="only measurements of this host (a merged database may hold several)")
    pr.add_argument("--device", help="only measurements on this device (cpu, cuda)")
    pr.add_argument("--threads", type=positive, help="only measurements taken with this many threads")
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
    pr.set_defaults(handler=run)


def run(args) -> None:
    import json

    from opcost.analysis import estimate
    from opcost.report import trust

    db = read_db(args.db)
    spec, dtype = {}, None  # with a config, its entry and dtype: a workload the database holds is checked against it
    if args.config:
        cfg = config_of(args)
        spec, dtype = (cfg.get("models") or {}).get(args.model) or {}, cfg["dtype"]
    if args.scenario and not args.tier:
        raise OpcostError("--scenario", "says which tensors are on a slower tier: give the tier with --tier")
    mode = workload_mode(args)
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
        args.tier, beyond_measured(db, args.model, mode),
        attention=types.str.contains("attention|softmax", case=False).any()))
    if not no_decode:  # far past what was measured: no figure covers it
        expect = trust.beyond(p.beyond_share, p.farthest) or expect
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


def beyond_measured(db: dict, model: str, mode: str) -> float | None:
    """A decode step's context over the longest its model was measured at in the database (None: not a decode step,
    or none measured)."""
    from opcost.model.modes import decode_context

    asked = decode_context(mode)
    held = [c for c in map(decode_context, set(db["layers"].loc[db["layers"]["model"] == model, "mode"])) if c]
    return asked / max(held) if asked and held else None
