"""The accuracy table: docs/accuracy.md and README's "How accurate is it?" section, generated from the benchmarks'
records (benchmarks/records/*.json, written by a benchmark run with ``--record``; see benchmarks/_common.py).

docs/accuracy.md: one row per record and accuracy figure: the date and host of the run, the command that reproduces
it, the figure and its value. README: one row per question users ask (``ANSWERS``), the median and worst error
against each reference, the number of cases, and when and where it was measured; "not measured" where no record
answers; the same rows by kind of answer go to src/opcost/report/accuracy.json, from which `opcost predict` and
`opcost advise` say what to expect (opcost.report.trust). Which SUMMARY keys of a benchmark are accuracy figures,
and what each means, is the one mapping ``SHOWN`` below. A benchmark run again with ``--record`` replaces its
record, so the table always shows each benchmark's last recorded run.

    python benchmarks/accuracy_table.py           # rewrite docs/accuracy.md, README's section, the package's figures
    python benchmarks/accuracy_table.py --check   # exit 1 when any is not what the records give
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "records"
DOC = ROOT / "docs" / "accuracy.md"
README = ROOT / "README.md"
BEGIN, END = "<!-- accuracy:begin -->", "<!-- accuracy:end -->"


@dataclass(frozen=True)
class Figure:
    """One accuracy figure of a benchmark's SUMMARY line: its key (or ``value``, computed from the line), what it
    says, and how it is written (``abs``: a |relative error|, ``signed``: a relative error, ``of:<key>``: a fraction
    of the line's ``<key>`` workloads, written "15 of 22", ``times``: a ratio, written "0.42×")."""
    key: str
    what: str
    form: str = "abs"
    value: Callable[[dict], float] | None = None

    def of(self, line: dict):
        if self.value is not None:
            try:
                return self.value(line)
            except (KeyError, TypeError, ZeroDivisionError):
                return None
        return line.get(self.key)


ISO = "Σ isolated + overhead vs the rotation's iterations, median |error|"
# benchmark -> its accuracy figures, in the table's order: what a user's prediction can expect (in-situ sums, which
# need the model's own run, and the diagnostics of training_split, sweep_sampling, insitu_clock, profiling_efficiency
# and of the estimate's parts are left out)
SHOWN: dict[str, list[Figure]] = {
    "prediction_accuracy": [
        Figure("median_abs_err_isolated_ov", ISO),
    ],
    "transformer_accuracy": [
        Figure("median_abs_err_rot", f"transformers: {ISO}"),
        Figure("median_abs_err_ded", "transformers: the same vs dedicated runs, median |error|"),
    ],
    "decode": [
        Figure("median_abs_err_rot", f"decode steps: {ISO}"),
        Figure("median_abs_err_extrap", "decode steps never measured (4× and 16× the context, another batch), "
                                        "timed beside a measured step, median |error|"),
        Figure("max_abs_err_context", "decode steps at 4× the longest measured context, worst |error|"),
        Figure("median_abs_err_context16", "decode steps at 16× the longest measured context, median |error|"),
    ],
    "generate": [
        Figure("median_abs_err", "Hugging Face generate() of prompts and new-token counts never measured (GPT-2, "
                                 "Llama, Qwen2), timed in turn with a measured step, median |error|"),
    ],
    "transformer_unseen": [
        Figure("median_abs_err", "transformers never profiled, timed in turn with profiled models, median |error|"),
        Figure("within_15pct", "transformers never profiled: workloads within ±15%", "of:workloads"),
        Figure("median_abs_err_run", "transformers never profiled vs the run's dedicated times, median |error|"),
        Figure("in_interval", "transformers never profiled: the 90% interval holds the time in turn with profiled "
                              "models", "of:workloads"),
    ],
    "unseen_random": [
        Figure("median_abs_err", "models drawn at random from timm and transformers, never profiled, predicted from "
                                 "the default study's database, timed in turn with profiled models, median |error|"),
        Figure("max_abs_err", "the same, the worst model's |error|"),
        Figure("within_15pct", "the same: models within ±15%", "of:models"),
        Figure("in_interval", "the same: the 90% interval holds the time", "of:models"),
        Figure("median_width", "the same: the 90% interval's median width, high / low", "times",
               value=lambda line: 1 + line["median_width"]),
    ],
    "generalisation": [
        Figure("median_abs_err_model", "a model left out of the database, median |error|"),
        Figure("within_15pct_model", "a model left out: workloads within ±15%", "of:workloads"),
        Figure("median_abs_err_batch", "a batch size left out, median |error|"),
        Figure("median_abs_err_unseen", "`predict_only` models never profiled vs dedicated runs, median |error|"),
    ],
    "gpu_check": [
        Figure("err_isolated_ov_vs_dedicated", "GPU: Σ isolated + overhead vs a dedicated run", "signed"),
        Figure("err_predicted_vs_measured", "GPU: predicted without profiling vs measured", "signed"),
    ],
}


@dataclass(frozen=True)
class Answer:
    """One row of README's table: a question users ask, the record (its name) that answers it, and the SUMMARY keys
    of its median and worst |error| against opcost's own reference (``ref``), a dedicated run (``ded``) and a plain
    process of the user's timed in turn with opcost's (``plain``), and of how many cases (``n``); ``per_line``: a
    key of a signed error each SUMMARY line holds for one case (the median and worst |error| over the lines, in the
    ``ded`` column)."""
    key: str  # the kind of answer, as opcost.report.trust names it
    what: str
    record: str | None
    ref: tuple = (None, None)
    ded: tuple = (None, None)
    n: str | None = None
    per_line: str | None = None
    plain: tuple = (None, None)


ANSWERS = [
    Answer("cnn_inference", "the benchmark's four models, measured (inference: resnet18, mobilenet_v3_small, "
           "tiny_bert, tiny_dlrm; batches 1 and 8)", "prediction_accuracy",
           ("median_abs_err_isolated_ov", "max_abs_err_isolated_ov"),
           ("median_abs_err_isolated_ov_vs_dedicated", "max_abs_err_isolated_ov_vs_dedicated"), "workloads",
           plain=("median_abs_err_isolated_ov_vs_plain", "max_abs_err_isolated_ov_vs_plain")),
    Answer("cnn_training", "the same four models, measured (training, batch 8)", "prediction_accuracy@training",
           ("median_abs_err_isolated_ov", "max_abs_err_isolated_ov"), n="workloads"),
    Answer("bert_base", "BERT-base, measured (inference)", "prediction_accuracy@bert_base@inference",
           ("median_abs_err_isolated_ov", None), ("median_abs_err_isolated_ov_vs_dedicated", None), "workloads"),
    Answer("transformer_small", "transformers, measured (small widths)", "transformer_accuracy",
           ("median_abs_err_rot", "max_abs_err_rot"), ("median_abs_err_ded", "max_abs_err_ded"), "workloads",
           plain=("median_abs_err_vs_plain", "max_abs_err_vs_plain")),
    Answer("transformer_real", "transformers, measured (real widths)", "transformer_accuracy@transformers_real",
           ("median_abs_err_rot", "max_abs_err_rot"), ("median_abs_err_ded", "max_abs_err_ded"), "workloads"),
    Answer("decode_measured", "a decode step, measured", "decode", ("median_abs_err_rot", "max_abs_err_rot"),
           ("median_abs_err_ded", "max_abs_err_ded"), "workloads"),
    Answer("decode_4x", "a decode step at 4× the longest measured context", "decode",
           ("median_abs_err_context", "max_abs_err_context")),
    Answer("decode_16x", "a decode step at 16× the longest measured context", "decode",
           ("median_abs_err_context16", "max_abs_err_context16")),
    Answer("decode_batch", "a decode step at a batch never measured", "decode", ("median_abs_err_batch", None)),
    Answer("generate", "`generate()`, prompts and lengths never measured (total)", "generate",
           ("median_abs_err", "max_abs_err"), ("median_abs_err_ded", None), "questions"),
    Answer("generate_ttft", "`generate()`: time to first token (the prefill)", "generate",
           ("median_abs_err_ttft", "max_abs_err_ttft"), n="questions"),
    Answer("generate_tpot", "`generate()`: time per output token", "generate",
           ("median_abs_err_tpot", "max_abs_err_tpot"), n="questions"),
    Answer("unseen_default", "a model never profiled, drawn at random, from the default database (models that "
           "could not be built or run are left out, `failed` in the record)", "unseen_random",
           ("median_abs_err", "max_abs_err"), n="models"),
    Answer("unseen_tailored", "a transformer never profiled, from sweeps at its own shapes",
           "transformer_unseen@transformer_sweeps", ("median_abs_err", "max_abs_err"), ("median_abs_err_run", None),
           "workloads"),
    Answer("left_out", "a model left out of the database it is predicted from", "generalisation",
           ("median_abs_err_model", None), n="workloads"),
    Answer("gpu_measured", "a GPU (H200), measured", "gpu_check", per_line="err_isolated_ov_vs_dedicated"),
    Answer("gpu_unseen", "a GPU (H200), a model never profiled", "gpu_check", per_line="err_predicted_vs_measured"),
    Answer("tier", "a slower memory tier's slowdown (`tiers.tsv`, `opcost predict --tier`, `opcost advise`)", None),
    Answer("energy", "energy", None),
]
LABELS = ("model", "workload")  # a SUMMARY line's key that names what the line is about (one line per model)


def load_records(folder: Path = RECORDS) -> list[dict]:
    """Every record, in SHOWN's order of benchmarks (then by name)."""
    order = list(SHOWN)
    records = [dict(json.loads(p.read_text()), name=p.stem) for p in sorted(folder.glob("*.json"))]
    return sorted(records, key=lambda r: (order.index(r["benchmark"]) if r["benchmark"] in order else len(order),
                                          r["name"]))


def host_text(host: dict) -> str:
    if host.get("machine"):  # a record carried over from the log names the machine as the log does
        return host["machine"]
    cpu, cores, gpu = host.get("cpu"), host.get("cores"), host.get("gpu")
    text = f"{cpu}, {cores} cores" if cpu and cores else cpu or (f"{cores} CPU cores" if cores else "")
    return f"{gpu} ({text})" if gpu and text else gpu or text or "unknown"


def value_text(value, form: str, line: dict) -> str:
    if isinstance(value, str):
        return value
    if form.startswith("of:") and isinstance(line.get(form[3:]), (int, float)):
        total = line[form[3:]]
        return f"{round(value * total)} of {total}"
    if form == "times":
        return f"{value:.2f}×"
    return f"{value:+.1%}" if form == "signed" else f"{value:.1%}"


def rows(records: list[dict]) -> list[tuple[str, str, str, str, str]]:
    """(date, host, command, figure, value) per record and figure of SHOWN that its SUMMARY lines hold."""
    out = []
    for rec in records:
        for fig in SHOWN.get(rec["benchmark"], []):
            for line in rec["summaries"]:
                value = fig.of(line)
                if value is None:
                    continue
                label = next((line[k] for k in LABELS if k in line), None)
                what = f"{fig.what} ({label})" if label else fig.what
                out.append((rec["date"][:10], host_text(rec["host"]), f"`{rec['command']}`", what,
                            value_text(value, fig.form, line)))
    return out


def table(records: list[dict]) -> str:
    lines = ["| date | host | command | figure | value |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows(records)]
    return "\n".join(lines) + "\n"


NOT_MEASURED = "not measured"
GPU_PATH = "src/opcost/measure"  # its files that name CUDA: the GPU path a GPU record's figures rest on


def _git(*args: str) -> str:
    import subprocess

    proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"accuracy_table: git {' '.join(args)}: {proc.stderr.strip() or 'failed'} (the staleness of "
                         "the records is judged from the repository's history: run it in a full clone)")
    return proc.stdout.strip()


def measured_at(record: dict) -> str:
    """The commit a record's figures were measured at: its own, else the first commit that holds the record with
    its date (the code it was measured with is at most that new)."""
    if record.get("commit"):
        return record["commit"]
    path = f"benchmarks/records/{record['name']}.json"
    first = None
    for commit in _git("log", "--format=%H", "--", path).split():
        try:
            if json.loads(_git("show", f"{commit}:{path}")).get("date") != record["date"]:
                break
        except (SystemExit, json.JSONDecodeError):  # deleted, or not a record, at that commit
            break
        first = commit
    return first or _git("rev-parse", "HEAD")


def stale(record: dict) -> str | None:
    """Why a record's figures are not of the current code, None where they are taken to be: a GPU record older than
    a change to the GPU path (the files of ``GPU_PATH`` that name CUDA), or a record whose command names a file
    that changed since (its hash). Named by the first such commit, which later commits leave as it is."""
    if (record.get("host") or {}).get("gpu"):
        gpu = _git("grep", "-l", "-i", "cuda", "--", GPU_PATH).split()
        first = _git("log", "--reverse", "--abbrev=7", "--format=%h %ad", "--date=short",
                     f"{measured_at(record)}..HEAD", "--", *gpu).splitlines()
        if first:
            commit, date = first[0].split()
            return f"the GPU path changed since ({commit}, {date})"
    for name, digest in (record.get("files") or {}).items():
        path = ROOT / name
        if path.is_file() and hashlib.sha1(path.read_bytes()).hexdigest()[:len(digest)] != digest:
            return f"{name} changed since"
    return None


def cell(line: dict, keys: tuple) -> str:
    """"median (worst max)" of a SUMMARY ``line``'s two ``keys`` (either None: left out); :data:`NOT_MEASURED`
    where it lacks the median."""
    med, worst = (line.get(k) if k else None for k in keys)
    if not isinstance(med, (int, float)):
        return NOT_MEASURED
    return f"{med:.1%}" + (f" (worst {worst:.1%})" if isinstance(worst, (int, float)) else "")


def answer_row(answer: Answer, by_name: dict) -> tuple[str, ...]:
    """(question, against a plain process, against opcost's reference, against a dedicated run, cases, when and
    where) of one :class:`Answer` from the records ``by_name``."""
    rec = by_name.get(answer.record)
    if rec is None:
        return answer.what, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, "", ""
    when = f"{rec['date'][:10]}, {host_text(rec['host'])}"
    old = stale(rec)
    if old:  # shown, never as current
        when += f"; **stale**: {old}"
    if answer.per_line:
        errs = [abs(line[answer.per_line]) for line in rec["summaries"]
                if isinstance(line.get(answer.per_line), (int, float))]
        if not errs:
            return answer.what, NOT_MEASURED, NOT_MEASURED, NOT_MEASURED, "", when
        cells = [NOT_MEASURED, NOT_MEASURED, f"{statistics.median(errs):.1%} (worst {max(errs):.1%})"]
        n = len(errs)
    else:
        line = rec["summaries"][0]
        n = line.get(answer.n) if answer.n else None
        cells = [cell(line, answer.plain), cell(line, answer.ref), cell(line, answer.ded)]
    if old:
        cells = [c if c == NOT_MEASURED else f"stale: {c}" for c in cells]
    return answer.what, *cells, str(n) if n is not None else "", when


def answers_table(records: list[dict]) -> str:
    by_name = {r["name"]: r for r in records}
    lines = ["| what you ask | against your own script | against opcost's reference | against a dedicated run | "
             "cases | measured |", "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in answer_row(a, by_name)) + " |" for a in ANSWERS]
    return "\n".join(lines) + "\n"


REFERENCES_TEXT = (
    "Median |error| of the prediction (Σ isolated operator costs + the modelled overhead; estimates where nothing "
    "was measured), the worst beside it. *opcost's reference*: the model's own iterations timed in the same minutes "
    "as its operators (a step or model never measured: timed in turn with a measured one and scaled to that one's "
    "time then, so that the host's drift cancels). *A dedicated run*: the model alone, timed by opcost's end-to-end "
    "job in other minutes. *Your own script*: the model in a plain PyTorch process (glibc's default allocator, "
    "threads not pinned), its iterations timed in blocks alternating with opcost's process, and opcost's reference "
    "scaled by the ratio. *Not measured*: no record holds the figure (a record without a plain process's timing "
    "leaves that column blank; rerun its benchmark with `--record`). *Stale*: measured on code that has "
    "changed where it matters since (the GPU path for a GPU record, or a file its command names). Hosts: 2-core "
    "cloud VMs whose CPU model differed between runs; \"the shared 2-core VM\" is a record that did not name it.")


def readme_section(records: list[dict]) -> str:
    """What README holds between its markers: one row per question users ask (:data:`ANSWERS`)."""
    return (f"{BEGIN}\n{answers_table(records)}\n{REFERENCES_TEXT}\nEvery record, figure and command, and how "
            f"to refresh them: [docs/accuracy.md](docs/accuracy.md).\n{END}")


INTRO = """Generated by `python benchmarks/accuracy_table.py` from the records in `benchmarks/records/`; do not edit by
hand. A benchmark run with `--record` (or `OPCOST_RECORD=1`) writes its record,
`benchmarks/records/<benchmark>[@<config>][@<mode>].json` (date, host, command, commit, the hashes of the files
the command names, and the run's SUMMARY lines),
replacing that benchmark's previous one (a `--smoke` run writes none); this script then rewrites the table below and
README's "How accurate is it?" section. Two rules mark a record stale, in both: a GPU record older than a change to
the GPU path (the files of `src/opcost/measure/` that name CUDA), and a record whose command names a file that
changed since; other code changes since a record are not judged (each record names its commit below). Errors are
predicted / measured − 1. How each benchmark measures is in its docstring and in [methodology.md](methodology.md);
the runs are logged in
[measurements.md](../benchmarks/records/measurements.md).
"""


def evidence_text(record: dict) -> str:
    """A record's commit and file hashes, as docs/accuracy.md lists them."""
    text = f"commit {record['commit'][:10]}" + (" +" if record.get("uncommitted") else "")
    files = record.get("files") or {}
    return text + "".join(f", {name} {digest}" for name, digest in files.items())


def document(records: list[dict]) -> str:
    seeded = [r for r in records if r.get("seeded_from")]
    parts = ["# Accuracy\n", INTRO, table(records)]
    if seeded:
        log = "[measurements.md](../benchmarks/records/measurements.md)"
        parts.append(f"Records carried over from the dated log ({log}), each with the date and command of its run "
                     "as logged:\n")
        parts.append("\n".join(f"- `{r['name']}`: {r['seeded_from']}" for r in seeded) + "\n")
    traced = [r for r in records if r.get("commit")]
    if traced:
        parts.append("What each record rests on: the commit it was measured at (`+`: with uncommitted changes to "
                     "code or configs on top of it), and a hash of each file its command names:\n")
        parts.append("\n".join(f"- `{r['name']}`: {evidence_text(r)}" for r in traced) + "\n")
    old = [(r["name"], why) for r in records if (why := stale(r))]
    if old:
        parts.append("Stale records (README shows them marked as such): "
                     + "; ".join(f"`{n}`: {why}" for n, why in old) + ".\n")
    untraced = [r["name"] for r in records if not r.get("commit")]
    if untraced:
        parts.append("Records written before records carried their commit (date, host and command only; their "
                     "staleness is judged from the first commit that holds them): "
                     + ", ".join(f"`{n}`" for n in untraced) + ".\n")
    hidden = [r["name"] for r in records if not rows([r])]
    if hidden:
        parts.append("Records kept but not shown (their benchmarks' figures are diagnostics, not the accuracy of a "
                     "prediction: `SHOWN` in the script): " + ", ".join(f"`{n}`" for n in hidden) + ".\n")
    return "\n".join(parts)


TRUST = ROOT / "src" / "opcost" / "report" / "accuracy.json"  # what opcost predict and advise say to expect


def trust_figures(records: list[dict]) -> str:
    """README's rows by kind of answer (:class:`Answer` ``key``), as opcost.report.trust reads them."""
    by_name = {r["name"]: r for r in records}
    out = {}
    for a in ANSWERS:
        what, plain, ref, ded, n, when = answer_row(a, by_name)
        out[a.key] = {"what": what, "plain": plain, "ref": ref, "ded": ded, "n": n, "when": when}
    return json.dumps(out, indent=1, ensure_ascii=False) + "\n"


def with_section(readme: str, section: str) -> str:
    start, end = readme.index(BEGIN), readme.index(END) + len(END)
    return readme[:start] + section + readme[end:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only check that both files are up to date")
    args = ap.parse_args()
    records = load_records()
    wanted = {DOC: document(records), README: with_section(README.read_text(), readme_section(records)),
              TRUST: trust_figures(records)}
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"{p.relative_to(ROOT)} is not what the records give: run python benchmarks/accuracy_table.py")
        sys.exit(1 if stale else 0)
    for p in stale:
        p.write_text(wanted[p])
        print(f"wrote {p.relative_to(ROOT)}")
    print(f"{len(rows(records))} rows from {len(records)} records")


if __name__ == "__main__":
    main()
