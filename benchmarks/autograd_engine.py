"""What one backward() call costs beyond its nodes: the autograd engine's fixed cost per call, against the cost
per node of one backward over many.

Isolated profiling of a training configuration calls backward() once per call of the configuration, while a
training iteration calls it once for every node. This prints, side by side in one run, the per-node cost of the
backward of a small elementwise op (``x * 2``, 8 elements) called alone, for 20 independent outputs in one call,
and for a chain of 20 such ops in one call, then one SUMMARY line (``engine_us``: alone minus per node in a chain,
the fixed cost each isolated backward pays once more than in the model).

    python benchmarks/autograd_engine.py [--threads 1] [--nodes 20] [--smoke]   (--smoke: a tenth of the calls)
"""
from __future__ import annotations

import argparse
import time

from _common import prepare, summary


def per_call_us(fn, calls: int, warmup: int = 200) -> float:
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="a tenth of the calls (a functional check)")
    args = ap.parse_args()
    prepare(args.threads)
    share = 0.1 if args.smoke else 1.0

    def per_call(fn, calls: int) -> float:
        return per_call_us(fn, int(calls * share), int(200 * share))

    import torch

    x = torch.randn(8, requires_grad=True)
    y = x * 2
    alone = per_call(lambda: torch.autograd.backward([y], [torch.ones_like(y)], retain_graph=True), 3000)
    outs = [x * 2 for _ in range(args.nodes)]
    grads = [torch.ones_like(o) for o in outs]
    independent = per_call(lambda: torch.autograd.backward(outs, grads, retain_graph=True), 1000) / args.nodes
    chain = x
    for _ in range(args.nodes):
        chain = chain * 2
    chained = per_call(lambda: torch.autograd.backward([chain], [torch.ones_like(chain)], retain_graph=True),
                       1000) / args.nodes
    forward = per_call(lambda: x * 2, 3000)
    print(f"{'backward of x * 2':<44} {'us per node':>12}")
    print(f"{'alone, one engine call each':<44} {alone:12.1f}")
    print(f"{f'{args.nodes} independent outputs in one call':<44} {independent:12.1f}")
    print(f"{f'a chain of {args.nodes} in one call':<44} {chained:12.1f}")
    print(f"{'(the forward x * 2)':<44} {forward:12.1f}")
    summary(alone_us=alone, chained_us=chained, independent_us=independent, engine_us=alone - chained,
            alone_vs_chained=alone / chained)


if __name__ == "__main__":
    main()
