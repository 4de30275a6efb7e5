"""What `opcost predict --mode decode` prints: a decode step's summary (:func:`opcost.analysis.decode.summary`)."""
from __future__ import annotations

from opcost.analysis.optypes import label


def describe(s: dict) -> str:
    """A :func:`opcost.analysis.decode.summary` as the lines `opcost predict --mode decode` prints."""
    cond = ", ".join(f"{k} {s[k]}" for k in ("host", "device", "threads") if s.get(k) is not None)
    ms = lambda v: f"{v * 1e3:.3f} ms"  # noqa: E731
    lines = [f"{s['model']} decode step, context {s['context']}, batch {s['batch']} ({cond}): "
             f"{ms(s['step_s'])} per step (per token) [{ms(s['step_low_s'])}, {ms(s['step_high_s'])}], "
             f"{s['estimated_share']:.0%} estimated" +
             (f"; measured {ms(s['measured_step_s'])}" if s.get("measured_step_s") else "; no end-to-end measurement"),
             f"  {s['tokens_per_s']:.1f} tokens/s [{s['tokens_per_s_low']:.1f}, {s['tokens_per_s_high']:.1f}] "
             f"({s['batch']} sequence(s), one token each per step)",
             f"  reads per step: weights {s['weight_bytes'] / 1e6:.3f} MB, key/value cache "
             f"{s['kv_cache_bytes'] / 1e6:.3f} MB; attention and cache update {s['attention_share']:.0%} of the "
             "operator time",
             *([f"  memory bound {ms(s['bound_s'])} (those bytes over this host's read bandwidth at that size): the "
                f"predicted step reaches {s['bound_fraction']:.0%} of it" + (
                    f", the measured {s['measured_bound_fraction']:.0%}" if s.get("measured_bound_fraction") else "")]
               if s.get("bound_s") else []),
             f"  {'overhead between operators':<32} {ms(s['overhead_s']):>12}",
             *([f"  {'a slower memory level':<32} {ms(s['level_s']):>12} (its working set of "
                f"{s['footprint_bytes'] / 1e6:.1f} MB outgrows the measured steps' level)"]
               if s.get("level_s") else [])]
    lines += [f"  {label(op_type):<32} {ms(t):>12}" for op_type, t in s["top_op_types_s"].items()]
    return "\n".join(lines)
