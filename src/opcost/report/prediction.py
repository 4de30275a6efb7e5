"""What `opcost predict` prints for one workload: a :class:`opcost.analysis.estimate.Prediction` as text (a decode
step's and `generate()`'s answers: :mod:`opcost.report.decode`, :mod:`opcost.report.generate`)."""
from __future__ import annotations

from opcost.analysis.optypes import label
from opcost.analysis.overhead_sources import OVERHEAD_FROM
from opcost.measure.plain import PROCESS


def describe(p, model: str, statistic: str) -> str:
    """The lines `opcost predict` prints for the prediction ``p`` of ``model`` from the isolated costs' ``statistic``:
    the time and its interval, the runs it rests on, the plain process's gap, the overhead and the costliest op types,
    the sources, what the interval rests on and the least sure estimate."""
    cond = ", ".join(f"{k} {v}" for k, v in p.conditions.items())
    on = "" if p.tier is None else (f" with {p.scenario} on tier {p.tier}, {p.tier_slowdown:.2f}x the fast tier, "
                                    f"{p.tier_measured_share:.0%} of it from measured slowdowns")
    lines = [f"{model} {p.mode} b{p.batch} ({cond}; isolated costs, {statistic}){on}: "
             f"predicted {p.predicted_s * 1e3:.3f} ms [{p.low_s * 1e3:.3f}, {p.high_s * 1e3:.3f}], "
             f"{p.estimated_share:.0%} estimated" +
             (f"; measured {p.measured_s * 1e3:.3f} ms (ratio {p.predicted_s / p.measured_s:.3f})"
              if p.measured_s else "; no end-to-end measurement")]
    if p.runs_held > 1:
        lines.append(runs_line(p))
    process = PROCESS.format(threads=p.conditions.get("threads"))
    lines.append(f"  costs hold in opcost's measuring process ({process})" + (
        f"; in a plain process of yours (a script's own): {p.predicted_s * (1 + p.plain_gap) * 1e3:.3f} ms, "
        f"{p.plain_gap * 100:+.1f}% ({p.plain_gap_of})" if p.plain_gap is not None else ""))
    lines.append(f"  {'overhead between operators':<32} {p.overhead_s * 1e3:10.3f} ms "
                 f"({OVERHEAD_FROM[p.overhead_from]})")
    lines += [f"  {label(op_type):<32} {t * 1e3:10.3f} ms" for op_type, t in p.by_op_type().head(12).items()]
    lines.append("by source: " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in sorted(p.methods().items())))
    if p.interval_basis:
        lines.append(f"interval: {p.interval_basis}")
    if p.widest is not None:
        lines.append(f"least sure of the estimates: {label(p.widest)} (profile it, or sweep its shapes, to narrow "
                     "the interval most)")
    return "\n".join(lines)


def runs_line(p) -> str:
    """Where a prediction on a merged database of several runs took its costs and reference from."""
    total = sum(p.runs_s.values()) or 1.0
    shares = ", ".join(f"{r or '(unnamed)'} {s / total:.0%}" for r, s in sorted(p.runs_s.items()) if r != p.run)
    if p.run is None:
        return f"  runs: no end-to-end reference; measured costs from {shares or 'one run'}"
    if not p.other_runs_share:
        return (f"  run {p.run}: measured costs and end-to-end reference of this run (the database holds "
                f"{p.runs_held} runs on these conditions; --run picks another)")
    return (f"  mixes runs: end-to-end reference of run {p.run}, {p.other_runs_share:.0%} of the measured operator "
            f"time from other runs ({shares}), which it lacks")
