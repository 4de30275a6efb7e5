"""What `opcost predict --mode generate` prints: :func:`opcost.analysis.generate.predict`'s answer."""
from __future__ import annotations


def describe(g: dict) -> str:
    """A :func:`opcost.analysis.generate.predict` answer as the lines `opcost predict --mode generate` prints."""
    cond = ", ".join(f"{k} {g[k]}" for k in ("host", "device", "threads") if g.get(k) is not None)
    ms = lambda v: f"{v * 1e3:.3f} ms"  # noqa: E731
    span = lambda k: f"{ms(g[k + '_s'])} [{ms(g[k + '_low_s'])}, {ms(g[k + '_high_s'])}]"  # noqa: E731
    loop = g["loop"]
    lines = [f"{g['model']} generate(), batch {g['batch']}, prompt {g['prompt']}, {g['new']} new tokens ({cond}): "
             f"{span('total')}, {g['tokens_per_s']:.1f} tokens/s [{g['tokens_per_s_low']:.1f}, "
             f"{g['tokens_per_s_high']:.1f}], {g['estimated_share']:.0%} of the operator time estimated",
             f"  time to first token {span('ttft')}: the prefill {ms(g['prefill_s'])}"
             + (f" (measured {ms(g['prefill_measured_s'])})" if g.get("prefill_measured_s") else "")
             + f" + generate()'s setup {ms(loop['setup_s'])}"]
    if g["tpot_s"] is not None:
        lines.append(f"  time per output token {span('tpot')}: {g['new'] - 1} decode steps at contexts "
                     f"{g['prompt']}..{g['prompt'] + g['new'] - 2}, each + {ms(loop['per_step_s'])} of "
                     "generate()'s own loop")
        if g["decode_bound_s"] is not None:
            lines.append(f"  memory bound of the steps {ms(g['decode_bound_s'])} (weights and key/value cache over "
                         f"this host's read bandwidth at that size): the steps' operators predicted to reach "
                         f"{g['bound_fraction']:.0%} of it")
        lines.append(f"  {'context':>8} {'step':>12} {'interval':>25} {'estimated':>9} {'bound':>10} "
                     f"{'KV cache MB':>11}")
        for s in g["steps"]:
            interval = f"[{ms(s['low_s'])}, {ms(s['high_s'])}]"
            lines.append(f"  {s['context']:>8} {ms(s['step_s']):>12} {interval:>25} {s['estimated_share']:>9.0%} "
                         f"{ms(s['bound_s']) if s['bound_s'] is not None else '-':>10} "
                         f"{s['kv_cache_bytes'] / 1e6:>11.3f}")
    return "\n".join(lines)
