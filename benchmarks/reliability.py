"""Reliability: what a new user gets wrong, and what can go wrong, each tried for real and judged.

Every case runs the real thing in a working directory of its own: Snakemake on this repository's workflow (the
command line tests/helpers.py builds), the `opcost` command in a process of its own, real files. Each is judged:

- good: what should happen: a mistake refused (exit code not 0) with one line starting `opcost:` per problem, each
  naming its culprit, no traceback, nothing measured lost; or, where nothing is wrong, exit code 0 and the expected
  output;
- unclear: it works, but the message is not one line per problem, or does not name the culprit;
- bad: a traceback, a wrong exit code, or a command still running past its time limit (then killed);
- silently wrong: exit code 0 and a wrong output (a mistake accepted, rows lost, a summary that disagrees).

Cases on a completed run share one run of tests/data/tiny.yaml (3-4 min on a 2-core VM) and two short runs of
their own (models a user wants to be warned about; a run whose only model fails), made side by side in the
background while the cases that need no run go on; the cases that change a run's files put them back, and those
that rerun its jobs come last. Prints one line per case (`case  verdict  detail  [seconds]`), the count per verdict,
then one SUMMARY line. Reliability is measured like accuracy: the exit code is 0 whatever the verdicts.

    python benchmarks/reliability.py [--smoke] [--out DIR [--reuse]] [--only TEXT...] [--jobs 2]

--smoke: one case of each kind that needs no run of the workflow (a config mistake named by `snakemake -n` and by
`opcost check-config`, Snakemake's own message for a YAML syntax error, two CLI mistakes): six cases, seconds each;
the same checks, case by case, are in tests/test_bad_input.py.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml
from _common import ROOT, TINY, summary
from _common import workflow_command as command

GOOD, UNCLEAR, BAD, SILENT = "good", "unclear", "bad", "silently wrong"
VERDICTS = (GOOD, UNCLEAR, BAD, SILENT)
Verdict = tuple[str, str]  # (verdict, detail)

TINY_CFG = yaml.safe_load(TINY.read_text())
MLP = TINY_CFG["models"]["mlp"]  # a tiny model of tests/tiny_models.py: builds and runs in milliseconds
DRY_S, CLI_S, RUN_S = 180, 240, 1200  # time limits (s): a dry run, an opcost command, a run of the workflow


# ---------------------------------------------------------------------------------------------- running commands

@dataclass
class Done:
    """A finished command: ``rc`` None when it was killed at its time limit."""
    rc: int | None
    out: str
    err: str
    seconds: float
    started: float = 0.0  # time.time() at its start

    @property
    def text(self) -> str:
        return self.out + "\n" + self.err


_CASE = threading.local()  # .dir: the working directory of the case this thread runs


def run(cmd: list[str], cwd: Path, timeout: float, env: dict | None = None) -> Done:
    """``cmd`` in ``cwd``, in a session of its own so that a command past ``timeout`` is killed with its children."""
    t0, started = time.perf_counter(), time.time()
    proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env or command()[1], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        rc = None
    done = Done(rc, out, err, time.perf_counter() - t0, started)
    if (log := getattr(_CASE, "dir", None)) is not None:  # what the case ran, to read after its verdict
        with open(log / "commands.log", "a") as f:
            f.write(f"$ cd {cwd} && {' '.join(map(str, cmd))}\n# rc {rc} in {done.seconds:.1f} s\n"
                    f"## stdout\n{out}\n## stderr\n{err}\n\n")
    return done


def snakemake(cwd: Path, *args, timeout: float = DRY_S) -> Done:
    cmd, env = command(*map(str, args))
    return run(cmd, cwd, timeout, env)


def opcost(cwd: Path, *args, timeout: float = CLI_S) -> Done:
    return run([sys.executable, "-m", "opcost.cli", *args], cwd, timeout)


class _Plain(yaml.SafeDumper):
    """Every entry written out, as a user writes it (no YAML anchors for values that happen to be shared)."""

    def ignore_aliases(self, data):
        return True


def write_config(path: Path, config: dict | str) -> Path:
    """``config`` as a YAML file (a str: the file's text as it is, e.g. numbers as a user writes them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config if isinstance(config, str) else yaml.dump(config, Dumper=_Plain, sort_keys=False))
    return path


def tiny_config(**changes) -> dict:
    """tests/data/tiny.yaml with ``changes``: its settings (small timings) for a run of a few models of one's own."""
    cfg = copy.deepcopy(TINY_CFG)
    cfg.update(predict_only={}, sweeps=[], placement={"tiers": {"dram": {"numa": 0}}},
               profile={**cfg["profile"], "chunks": 1})
    cfg.update(changes)
    return cfg


# ---------------------------------------------------------------------------------------------- judging

def short(text: str, width: int = 170) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 3] + "..."


def gist(text: str) -> str:
    """What a reader takes from ``text``: its first error line (and the next, where it ends in a colon), else its
    last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Using workflow specific")]
    for i, ln in enumerate(lines):
        if "Error" in ln or "error:" in ln:
            return ln + (" " + lines[i + 1] if ln.endswith(":") and i + 1 < len(lines) else "")
    return lines[-1] if lines else "(no output)"


def broke(done: Done) -> Verdict | None:
    """Bad whatever was expected: killed at its time limit, or a traceback."""
    if done.rc is None:
        return BAD, f"still running after {done.seconds:.0f} s: killed"
    if "Traceback (most recent call last)" in done.text:
        return BAD, f"rc {done.rc}, a traceback: {raised(done.text)}"
    return None


def raised(text: str) -> str:
    """The exception of ``text``'s last traceback, and where it was raised."""
    lines = text[text.rfind("Traceback (most recent call last)"):].splitlines()
    at = next((i for i, ln in enumerate(lines) if re.match(r"[\w.]+(Error|Exception|Interrupt|Exit)\b", ln)), None)
    if at is None:
        return short(gist(text))
    where = [m for ln in lines[:at] if (m := re.match(r'\s+File "([^"]+)", line (\d+), in (\S+)', ln))]
    where = [m for m in where if m[1].startswith(str(ROOT)) and "site-packages" not in m[1]] or where  # opcost's
    return short(lines[at]) + (f" (at {Path(where[-1][1]).name}:{where[-1][2]} in {where[-1][3]})" if where else "")


def refused(done: Done, culprits: list[str], prefix: str = "opcost:", rc: int | None = None) -> Verdict:
    """A mistake: exit code not 0 (``rc``: this one) and one line starting with ``prefix`` per problem, each naming
    its culprit (``prefix`` None: any line naming the culprit, a message of Snakemake's own)."""
    if (bad := broke(done)) is not None:
        return bad
    if prefix is None:
        lines = [ln.strip() for ln in done.text.splitlines() if any(c in ln for c in culprits)]
    else:
        lines = [ln.strip() for ln in done.text.splitlines() if ln.startswith(prefix)]
    said = " | ".join(lines) or short(gist(done.text))
    if done.rc == 0:
        return SILENT, f"rc 0: accepted ({short(said)})"
    if rc is not None and done.rc != rc:
        return BAD, f"rc {done.rc}, not {rc}: {short(said)}"
    unnamed = [c for c in culprits if not any(c in ln for ln in lines)]
    if unnamed:
        return UNCLEAR, f"rc {done.rc}, {', '.join(map(repr, unnamed))} not named in one line: {short(said)}"
    if len(lines) != len(culprits):
        return UNCLEAR, f"rc {done.rc}, {len(lines)} lines for {len(culprits)} problem(s): {short(said)}"
    return GOOD, f"rc {done.rc}: {short(said, 220)}"


def accepted(done: Done, expect: str = "") -> Verdict:
    """Nothing wrong: exit code 0 (and ``expect`` in its output)."""
    if (bad := broke(done)) is not None:
        return bad
    if done.rc != 0:
        lines = [ln for ln in done.text.splitlines() if ln.startswith("opcost:")]
        return BAD, f"rc {done.rc}: {short(' | '.join(lines) or gist(done.text))}"
    if expect not in done.text:
        return SILENT, f"rc 0 but {expect!r} not in its output: {short(gist(done.text))}"
    return GOOD, f"rc 0 in {done.seconds:.1f} s"


def nothing_created(work: Path) -> Verdict | None:
    made = [d for d in ("results", "logs") if (work / d).exists()]
    return (BAD, f"created {' and '.join(made)}/ before stopping") if made else None


# ---------------------------------------------------------------------------------------------- the cases

@dataclass
class Case:
    name: str
    fn: Callable[[Path], Verdict]  # called with a working directory of its own
    smoke: bool = False  # in --smoke: needs no run of the workflow, takes about 2 s, one of its kind
    runs: tuple[str, ...] = ()  # the runs it reads or changes (RUN_CONFIGS): after the others, in order, one by one


CASES: list[Case] = []


def case(name: str, smoke: bool = False, runs: tuple[str, ...] = ()):
    def register(fn):
        CASES.append(Case(name, fn, smoke, runs))
        return fn

    return register


def _free_bytes() -> int:
    with open("/proc/meminfo") as f:
        return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemAvailable:"))


def _llama() -> dict:
    """`hf:llama` at its default size (6.6 billion parameters, 26 GB), deeper on a host where that would fit."""
    layers = 32 * (1 + _free_bytes() // 26_000_000_000)
    return {"model": "hf:llama"} if layers == 32 else {"model": "hf:llama", "kwargs": {"num_hidden_layers": layers}}


HAS_CUDA = Path("/dev/nvidiactl").exists()
HAS_RAPL = any(os.access(p, os.R_OK) for p in Path("/sys/class/powercap").glob("intel-rapl:*/energy_uj"))


DRY, CHECK = "snakemake -n", "check-config"  # the two ways a config is checked before a run
BOTH = (DRY, CHECK)


@dataclass
class Mistake:
    """A config file a user might write: ``culprits``, the text each problem's line must name ([]: nothing is
    wrong, the config must be accepted); ``smoke``: the checks of it that --smoke runs (cheap: a mistake found
    before torch is imported); ``snakemake_owns``: Snakemake reads the file before opcost sees it."""
    name: str
    config: dict | str | None  # None: no file at all
    culprits: list[str]
    smoke: tuple[str, ...] = ()
    snakemake_owns: bool = False
    fname: str = "my.yaml"


MISTAKES = [
    Mistake("unknown key", {"models": {"mlp": MLP}, "colour": "red"}, ["colour"]),
    Mistake("threads: two", {"models": {"mlp": MLP}, "threads": "two"}, ["threads"]),
    Mistake("batch_sizes: [0]", {"models": {"mlp": MLP}, "batch_sizes": [0]}, ["batch_sizes"]),
    Mistake("empty models", {"models": {}}, ["models"]),
    Mistake("a model name with a slash", {"models": {"a/b": MLP}}, ["a/b"]),
    Mistake("a 300-character model name", {"models": {"m" * 300: MLP}}, ["m" * 40]),
    Mistake("hf:NoSuchModel", {"models": {"llm": {"model": "hf:NoSuchModel"}}}, ["NoSuchModel"]),
    Mistake("timm:resnet9999", {"models": {"net": {"model": "timm:resnet9999"}}}, ["resnet9999"]),
    Mistake("nowhere:make", {"models": {"net": {"model": "nowhere:make"}}}, ["nowhere:make"]),
    Mistake("tests.tiny_models:no_such_factory", {"models": {"net": {"model": "tests.tiny_models:no_such_factory"}}},
            ["no_such_factory"]),
    Mistake("hf:llama at its default size", {"models": {"llm": _llama()}}, ["model llm"]),
    Mistake("a batch no memory holds", {"models": {"mlp": MLP}, "batch_sizes": [10 ** 12]}, ["batch 1000000000000"]),
    Mistake("input_range: [5, 2]", {"models": {"ids": {**MLP, "input_dtype": "int64", "input_range": [5, 2]}}},
            ["input_range"]),
    Mistake("predict_only naming a profiled model", {"models": {"mlp": MLP}, "predict_only": {"mlp": MLP}},
            ["predict_only"]),
    Mistake("predict_only naming a profiled model by a YAML alias", "models:\n  mlp: &m {model: "
            '"tests.tiny_models:make_mlp", input_shapes: [[8]]}\npredict_only:\n  mlp: *m\n', ["predict_only"]),
    Mistake("resnet1800 beside a good model", {"models": {"mlp": MLP, "resnet1800": {}}}, ["resnet1800"]),
    Mistake("device: cuda", {"models": {"mlp": MLP}, "device": "cuda"}, [] if HAS_CUDA else ["device"]),
    Mistake("abs_ci_s: 2e-7 (a YAML 1.1 string)", 'models:\n  mlp: {model: "tests.tiny_models:make_mlp", '
            'input_shapes: [[8]]}\nprofile:\n  timing: {abs_ci_s: 2e-7}\n', []),
    Mistake("a sweep with grid: {}", {"models": {"mlp": MLP}, "sweeps": [{"op": "Linear", "grid": {}}]},
            ["sweeps[0].grid"]),
    Mistake("modes: [inferance]", {"models": {"mlp": MLP}, "modes": ["inferance"]}, ["modes[0]"]),
    Mistake("a Conv2d sweep point whose groups do not divide its channels", {"models": {"mlp": MLP}, "sweeps": [
        {"op": "Conv2d", "points": [{"channels": 30, "groups": 4}]}]}, ["groups 4"]),
    Mistake("a config file that does not exist", None, ["no_such.yaml"], snakemake_owns=True, fname="no_such.yaml"),
    Mistake("a YAML syntax error", "models:\n  mlp: {model: tests.tiny_models:make_mlp\nthreads: 1\n",
            ["broken.yaml"], BOTH, snakemake_owns=True, fname="broken.yaml"),
    Mistake("several bad keys", {"models": {"mlp": {**MLP, "batch_sizes": [0]}}, "threads": "two", "colour": "red"},
            ["colour", "threads", "batch_sizes"], BOTH),
    Mistake("several bad models", {"models": {"mlp": MLP, "gone": {"model": "nowhere:make"},
                                              "ids": {**MLP, "input_dtype": "int64", "input_range": [5, 2]},
                                              "big": {**MLP, "batch_sizes": [10 ** 12]}}},
            ["model gone", "models.ids.input_range", "model big"]),
    Mistake("a bad key and a bad model", {"models": {"gone": {"model": "nowhere:make"}}, "threads": "two"},
            ["threads", "model gone"]),
    Mistake("loop.initial_op_types: [Lineer]", {"models": {"mlp": MLP}, "loop": {"initial_op_types": ["Lineer"]}},
            ["Lineer"]),
    Mistake("resnet18 at batch 100000 (activations beyond memory)", {"models": {"net": {"model": "resnet18"}},
                                                                    "batch_sizes": [100000]}, ["batch 100000"]),
    Mistake("a context beyond a decoder's learned positions", {"models": {"llm": {
        "model": "hf:gpt2", "modes": ["decode"], "context_lens": [1024],
        "kwargs": {"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 64}}}}, ["context 1024"]),
    Mistake("profile.chunks: 2.0 (a whole number written as a float)", {"models": {"mlp": MLP},
                                                                       "profile": {"chunks": 2.0}}, []),
    Mistake("a model named 2024 (YAML reads a number)", 'models:\n  2024: {model: "tests.tiny_models:make_mlp", '
            'input_shapes: [[8]]}\n', ["models.2024"]),
    Mistake("a tier named far.1", {"models": {"mlp": MLP}, "placement": {"tiers": {"dram": {"numa": 0},
                                                                                     "far.1": {"numa": 1}}}},
            ["far.1"]),
    Mistake("generate with prompts and no new_tokens", {"models": {"mlp": MLP}, "generate": {"prompts": [16]}},
            ["generate.new_tokens"]),
    Mistake("generate without a decoder", {"models": {"mlp": MLP}, "generate": {"prompts": [16],
                                                                                "new_tokens": [4]}}, ["generate"]),
    Mistake("min_samples over max_samples", {"models": {"mlp": MLP}, "e2e": {"timing": {"min_samples": 50,
                                                                                        "max_samples": 10}}},
            ["min_samples"]),
    Mistake("energy.meter: rapl", {"models": {"mlp": MLP}, "energy": {"meter": "rapl"}},
            [] if HAS_RAPL else ["energy.meter"]),
    Mistake("advise.budgets: ['..%']", {"models": {"mlp": MLP}, "advise": {"budgets": ["..%", 0.5]}},
            ["advise.budgets[0]"]),
    Mistake("advise.budgets: ['150%']", {"models": {"mlp": MLP}, "advise": {"budgets": ["150%"]}},
            ["advise.budgets[0]"]),
    Mistake("a sweep point with channels_last: 3", {"models": {"mlp": MLP}, "sweeps": [
        {"op": "Conv2d", "points": [{"channels_last": 3}]}]}, ["channels_last"]),
    Mistake("seq_len past a decoder's learned positions (inference)", {"models": {"llm": {
        "model": "hf:gpt2", "seq_len": 2048, "kwargs": {"n_layer": 1, "n_embd": 32, "n_head": 2}}}}, ["seq_len 2048"]),
    Mistake("a transformers kwarg of the wrong type", {"models": {"llm": {"model": "hf:gpt2", "kwargs": {
        "n_layer": "two"}}}}, ["model llm: hf:gpt2: GPT2Config: TypeError"]),
    Mistake("a negative transformers layer count", {"models": {"llm": {"model": "hf:gpt2", "kwargs": {
        "n_layer": -1}}}}, ["model llm: hf:gpt2: GPT2Config setting 'n_layer' is -1"]),
    Mistake("input_range for a transformers model's own inputs", {"models": {"llm": {
        "model": "hf:gpt2", "input_range": [0, 10], "kwargs": {"n_layer": 1, "n_embd": 32, "n_head": 2}}}},
            ["models.llm.input_range"]),
    Mistake("channels_last for a model of flat inputs", {"models": {"mlp": {**MLP, "memory_format": "channels_last"}}},
            ["models.mlp.memory_format"]),
    Mistake("a million-token context", {"models": {"llm": {
        "model": "hf:llama", "modes": ["decode"], "context_lens": [10 ** 6],
        "kwargs": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
                   "vocab_size": 64}}}},
            ["context 1000000"]),
    Mistake("threads: 10**11", {"models": {"mlp": MLP}, "threads": 10 ** 11}, ["threads"]),
    Mistake("a sweep with both a grid and points", {"models": {"mlp": MLP}, "sweeps": [
        {"op": "Linear", "grid": {"features": [8, 16]}, "points": [{"rows": 4}]}]}, ["sweeps: Linear"]),
    Mistake("a 640 GB sweep point", {"models": {"mlp": MLP}, "sweeps": [
        {"op": "Linear", "points": [{"features": 200000, "rows": 4}]}]}, ["sweep-Linear-f200000-r4"]),
    Mistake("on_missing: strict with a tier this host lacks", {"models": {"mlp": MLP}, "placement": {
        "tiers": {"dram": {"numa": 0}, "far": {"numa": 63}}, "on_missing": "strict"}}, ["placement.tiers.far"]),
    Mistake("a model named like a sweep point", {"models": {"sweep-Linear-f16-r4": MLP}, "sweeps": [
        {"op": "Linear", "grid": {"features": [16], "rows": [4]}}]}, ["sweep-Linear-f16-r4"]),
    Mistake("token_major for flat inputs", {"models": {"mlp": {**MLP, "memory_format": "token_major"}}},
            ["models.mlp.memory_format"]),
    Mistake("seq_len for a model that is no transformers one", {"models": {"mlp": {**MLP, "seq_len": 64}}},
            ["models.mlp.seq_len"]),
]


def _dry_run(mistake: Mistake, work: Path) -> Verdict:
    """`snakemake -n --configfile FILE`: stops before any job, every problem named in one line."""
    if mistake.config is not None:
        write_config(work / mistake.fname, mistake.config)
    done = snakemake(work, "-n", "--configfile", mistake.fname)
    if (made := nothing_created(work)) is not None:
        return made
    if not mistake.culprits:
        return accepted(done, "Job stats")
    verdict = refused(done, mistake.culprits, prefix=None if mistake.snakemake_owns else "opcost:")
    return (verdict[0], verdict[1] + " (Snakemake's own message)") if mistake.snakemake_owns else verdict


def _check_config(mistake: Mistake, work: Path) -> Verdict:
    """`opcost check-config FILE`: every problem named in one line; a good config: `ok`."""
    if mistake.config is not None:
        write_config(work / mistake.fname, mistake.config)
    done = opcost(work, "check-config", mistake.fname)
    return accepted(done, ": ok,") if not mistake.culprits else refused(done, mistake.culprits)


for _m in MISTAKES:
    CASES.append(Case(f"config: {_m.name} [{DRY}]", lambda work, m=_m: _dry_run(m, work), smoke=DRY in _m.smoke))
    CASES.append(Case(f"config: {_m.name} [{CHECK}]", lambda work, m=_m: _check_config(m, work),
                      smoke=CHECK in _m.smoke))


@case("config: the default config/config.yaml [snakemake -n]")
def _default_config(work: Path) -> Verdict:
    return accepted(snakemake(work, "-n", "--configfile", ROOT / "config" / "config.yaml"), "Job stats")


@case("config: --config threads=1 without --configfile [snakemake -n]")
def _default_config_changed(work: Path) -> Verdict:
    shutil.copytree(ROOT / "config", work / "config")  # the embedded default, where a run in the repository finds it
    return accepted(snakemake(work, "-n", "--config", "threads=1"), "Job stats")


@case("cli: predict --batch 0", smoke=True)
def _predict_batch_zero(work: Path) -> Verdict:
    done = opcost(work, "predict", "resnet18", "--batch", "0")
    return refused(done, ["--batch"], prefix="opcost predict: error:", rc=2)


@case("cli: extract --batch two")
def _extract_batch_two(work: Path) -> Verdict:
    done = opcost(work, "extract", "tiny_dlrm", "--batch", "two", "--out", "l.parquet")
    if (work / "l.parquet").exists():
        return SILENT, "wrote l.parquet"
    return refused(done, ["--batch"], prefix="opcost extract: error:", rc=2)


@case("cli: predict --db a directory without a database")
def _predict_no_database(work: Path) -> Verdict:
    (work / "empty").mkdir()
    return refused(opcost(work, "predict", "tiny_dlrm", "--batch", "2", "--db", "empty"), ["empty"])


@case("cli: predict before any run (no results/db)")
def _predict_before_a_run(work: Path) -> Verdict:
    return refused(opcost(work, "predict", "tiny_dlrm", "--batch", "2"), ["results/db"])


@case("cli: extract to an unwritable path")
def _extract_unwritable(work: Path) -> Verdict:
    blocker = work / "a_file"
    blocker.write_text("")  # a file where the output's directory should be
    return refused(opcost(work, "extract", "tiny_dlrm", "--out", blocker / "layers.parquet"), [str(blocker)])


@case("cli: db merge of a directory without a database")
def _merge_no_database(work: Path) -> Verdict:
    (work / "notes").mkdir()
    (work / "notes" / "notes.txt").write_text("not a database")
    done = opcost(work, "db", "merge", "notes", "--out", "merged")
    if (work / "merged").exists():
        return SILENT, f"rc {done.rc}, created merged/"
    return refused(done, ["notes"])


@case("cli: db show --db a directory without a database", smoke=True)
def _show_no_database(work: Path) -> Verdict:
    (work / "notes").mkdir()
    return refused(opcost(work, "db", "show", "--db", "notes"), ["notes"])


@case("cli: extract --out l.csv")
def _extract_csv(work: Path) -> Verdict:
    done = opcost(work, "extract", "tiny_dlrm", "--batch", "2", "--out", "l.csv")
    if (work / "l.csv").exists():
        return SILENT, "wrote Parquet into l.csv"
    return refused(done, ["--out l.csv"])


@case("cli: check-config with an empty path")
def _check_empty_path(work: Path) -> Verdict:
    return refused(opcost(work, "check-config", ""), ["config ''"])


@case("cli: db show --param =3")
def _show_param_without_name(work: Path) -> Verdict:
    return refused(opcost(work, "db", "show", "--param", "=3"), ["--param =3"])


@case("cli: advise --out a table's path")
def _advise_out_parquet(work: Path) -> Verdict:
    return refused(opcost(work, "advise", "mlp", "--batch", "2", "--budget", "50%", "--out", "plan.parquet"),
                   ["--out plan.parquet"])


@case("cli: check-models --models a name the config lacks")
def _check_models_unknown(work: Path) -> Verdict:
    return refused(opcost(work, "check-models", ROOT / "tests" / "data" / "tiny.yaml", "--models", "nosuch"),
                   ["--models nosuch"])


@case("cli: extract a model given as module:callable")
def _extract_module_callable(work: Path) -> Verdict:
    return accepted(opcost(work, "extract", "torchvision.models:squeezenet1_1", "--batch", "1", "--out",
                           "l.parquet"), "Conv2d")


@case("cli: check-config with two broken models")
def _check_two_broken(work: Path) -> Verdict:
    write_config(work / "c.yaml", {"batch_sizes": [2], "models": {
        "mlp": MLP, "gone": {"model": "nowhere:make"}, "broken": {"model": "tests.tiny_models:explode"}}})
    return refused(opcost(work, "check-config", "c.yaml"), ["model gone", "model broken"])


# ---------------------------------------------------------------------------------------------- completed runs

RUN_CONFIGS = {  # the runs that cases share: tests/data/tiny.yaml, models a user wants to be warned about, a
    # run whose only model fails
    "tiny": TINY,
    "warnings": tiny_config(models={
        "nan": {"model": "tests.tiny_models:make_nan", "input_shapes": [[8]]},
        "mutating": {"model": "tests.tiny_models:make_mutating", "input_shapes": [[8]]},
        "early_exit": {"model": "tests.tiny_models:make_early_exit", "input_shapes": [[8]]}}),
    "broken": tiny_config(models={"broken": TINY_CFG["models"]["broken"]}),
}


class Runs:
    """Runs of the workflow, each made once on first use and shared by the cases that read it."""

    def __init__(self, out: Path, reuse: bool = False):
        self.out, self.reuse = out, reuse
        self.made: dict[str, tuple[Path, Done]] = {}
        self.locks = {name: threading.Lock() for name in RUN_CONFIGS}

    def start(self, names) -> None:
        """Make the runs ``names`` side by side, each in a thread of its own, while other cases go on (their jobs
        are bound by their timing settings more than by the CPU, and no case judges how fast they measured)."""
        for name in names:
            threading.Thread(target=self.get, args=(name,), daemon=True).start()

    def get(self, name: str) -> tuple[Path, Done]:
        with self.locks[name]:
            return self._get(name, RUN_CONFIGS[name])

    def _get(self, name: str, config: dict | Path) -> tuple[Path, Done]:
        work = self.out / "runs" / name
        if name not in self.made and self.reuse and (work / "snakemake.rc").exists():
            self.made[name] = (work, Done(int((work / "snakemake.rc").read_text()), "",
                                          (work / "snakemake.out").read_text(), 0.0))
        if name not in self.made:
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            if isinstance(config, Path):
                shutil.copy(config, work / "c.yaml")
            else:
                write_config(work / "c.yaml", config)
            print(f"# running the workflow on the {name} config in {work}...", flush=True)
            done = snakemake(work, "--configfile", "c.yaml", "--cores", "1", timeout=RUN_S)
            (work / "snakemake.out").write_text(done.err)
            (work / "snakemake.rc").write_text(str(done.rc))
            print(f"# ...rc {done.rc} in {done.seconds:.0f} s", flush=True)
            self.made[name] = (work, done)
        return self.made[name]

    def tiny(self) -> Path:
        """The shared completed run of tests/data/tiny.yaml (its config: c.yaml in it)."""
        work, done = self.get("tiny")
        if done.rc != 0 or not (work / "results" / "summary.txt").exists():
            raise RunFailed(f"the shared tiny run failed (rc {done.rc}): {short(gist(done.text))}")
        return work


class RunFailed(Exception):
    """A case's run did not complete: the case is bad."""


RUNS: Runs  # set by main


def tables_rows(db: Path) -> dict[str, int]:
    import pandas as pd

    return {p.name: len(pd.read_parquet(p)) for p in sorted(db.glob("*.parquet"))}


@case("run: the tiny run completes", runs=("tiny",))
def _tiny_completes(work: Path) -> Verdict:
    tiny = RUNS.tiny()
    return GOOD, f"rc 0 in {RUNS.made['tiny'][1].seconds:.0f} s, {len(list((tiny / 'results').rglob('*')))} paths"


@case("run: the summary file is what the run printed last", runs=("tiny",))
def _summary_printed(work: Path) -> Verdict:
    tiny = RUNS.tiny()
    text = (tiny / "results" / "summary.txt").read_text().strip()
    printed = RUNS.made["tiny"][1].err
    if not text or text not in printed:
        return SILENT, "results/summary.txt is not what the run printed"
    after = [ln for ln in printed[printed.rfind(text) + len(text):].splitlines()
             if ln.strip() and not ln.startswith(("Complete log", "Elapsed time"))]
    if after:
        return UNCLEAR, f"printed after the summary: {short(' | '.join(after))}"
    return GOOD, f"{len(text.splitlines())} lines, printed last"


def _shown(table: str) -> dict[tuple[str, str], tuple[str, str]]:
    """{(workload, source): (predicted ms, measured ms)} as the summary's first table shows them."""
    lines = table.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:6] == ["workload", "source", "predicted", "ms",
                                                                     "measured", "ms"])
    rows = {}
    for ln in lines[head + 1:]:
        if not ln.strip():
            break
        parts = ln.split()
        rows[parts[0], parts[1]] = (parts[2], parts[3])
    return rows


def _same(shown: str, seconds: float) -> bool:
    """Whether ``shown`` (ms, as printed) is ``seconds`` rounded as printed."""
    decimals = len(shown.partition(".")[2])
    return abs(float(shown) - seconds * 1e3) <= 0.5 * 10 ** -decimals + 1e-12


@case("run: predictions.tsv agrees with the summary", runs=("tiny",))
def _predictions_in_summary(work: Path) -> Verdict:
    import pandas as pd

    tiny = RUNS.tiny()
    try:
        shown = _shown((tiny / "results" / "summary.txt").read_text())
    except StopIteration:
        return UNCLEAR, "the summary has no table of predicted and measured ms"
    pred = pd.read_csv(tiny / "results" / "validation" / "predictions.tsv", sep="\t")
    pred["workload"] = pred["model"] + "/" + pred["mode"] + "/b" + pred["batch"].astype(str)
    pred = pred[pred["source"].isin({src for _, src in shown})]
    wrong = [f"{w} ({src})" for w, src in sorted(shown) if not any(
        _same(shown[w, src][0], r.predicted_s) and _same(shown[w, src][1], r.measured_s)
        for r in pred[(pred["workload"] == w) & (pred["source"] == src)].itertuples())]
    missing = sorted(set(pred["workload"]) - {w for w, _ in shown})
    if wrong or missing or not shown:
        return SILENT, (f"{len(shown)} summary rows; differ from predictions.tsv: {wrong}; in predictions.tsv only: "
                        f"{missing}")
    return GOOD, f"{len(shown)} workloads, predicted and measured ms as in predictions.tsv"


@case("run: no duplicate rows in results/db", runs=("tiny",))
def _no_duplicates(work: Path) -> Verdict:
    import pandas as pd

    db = RUNS.tiny() / "results" / "db"
    dup = {}
    for path in sorted(db.glob("*.parquet")):
        df = pd.read_parquet(path)
        hashable = df.astype(str)
        if (n := int(hashable.duplicated().sum())):
            dup[path.name] = n
    meas = pd.read_parquet(db / "measurements.parquet")
    iso = meas[meas["source"] == "isolated"] if "source" in meas.columns else meas
    key = [c for c in ("config_id", "phase", "placement") if c in iso.columns]
    if (n := int(iso.duplicated(key).sum())):
        dup[f"isolated rows per {'/'.join(key)}"] = n
    if dup:
        return SILENT, f"duplicates: {dup}"
    return GOOD, f"{len(list(db.glob('*.parquet')))} tables, {len(iso)} isolated rows unique per {'/'.join(key)}"


@case("run: result files are readable by all (umask)", runs=("tiny",))
def _file_modes(work: Path) -> Verdict:
    mask = os.umask(0)
    os.umask(mask)
    want = 0o666 & ~mask
    files = [p for p in (RUNS.tiny() / "results").rglob("*") if p.is_file()]
    odd = [f"{p.relative_to(RUNS.tiny())} {p.stat().st_mode & 0o777:o}" for p in files
           if p.stat().st_mode & 0o777 != want]
    if odd:
        return SILENT, f"{len(odd)} of {len(files)} files not {want:o}: {short(', '.join(odd[:4]))}"
    return GOOD, f"{len(files)} files, all {want:o}"


@case("run: no CUDA probing noise on a CPU run", runs=("tiny",))
def _no_cuda_noise(work: Path) -> Verdict:
    RUNS.tiny()
    out = RUNS.made["tiny"][1].text
    noisy = [ln for ln in out.splitlines() if "gpuGetDeviceCount" in ln]
    return (UNCLEAR, f"{len(noisy)} line(s): {short(noisy[0])}") if noisy else (GOOD, "no gpuGetDeviceCount line")


@case("run: the same command again has nothing to do", runs=("tiny",))
def _rerun_nothing(work: Path) -> Verdict:
    done = snakemake(RUNS.tiny(), "-n", "--configfile", "c.yaml", "--cores", "1")
    if (bad := broke(done)) is not None or done.rc != 0:
        return bad or (BAD, f"rc {done.rc}: {short(gist(done.text))}")
    if "Nothing to be done" not in done.text:
        jobs = [ln.split()[1] for ln in done.text.splitlines() if ln.startswith("total ")]
        return BAD, f"a rerun of the unchanged run schedules {jobs[0] if jobs else 'some'} job(s)"
    return GOOD, "Nothing to be done"


@case("run: predict from the run's database", runs=("tiny",))
def _predict(work: Path) -> Verdict:
    tiny = RUNS.tiny()
    done = opcost(tiny, "predict", "mlp_wide", "--batch", "2", "--config", "c.yaml", "--json")
    if (bad := broke(done)) is not None or done.rc != 0:
        return bad or (BAD, f"rc {done.rc}: {short(gist(done.text))}")
    try:
        got = json.loads(done.out)
        low, mid, high = (float(got[k]) for k in ("low_s", "predicted_s", "high_s"))
    except (ValueError, KeyError, TypeError) as e:
        return SILENT, f"rc 0, not the JSON object documented ({e}): {short(done.out)}"
    if not 0 < low <= mid <= high:
        return SILENT, f"predicted {mid:.3g} s outside its interval [{low:.3g}, {high:.3g}]"
    return GOOD, f"mlp_wide b2 predicted {mid * 1e3:.3f} ms [{low * 1e3:.3f}, {high * 1e3:.3f}]"


@case("run: predict a profiled model with a config that builds it wider", runs=("tiny",))
def _predict_other_variant(work: Path) -> Verdict:
    tiny = RUNS.tiny()
    cfg = yaml.safe_load((tiny / "c.yaml").read_text())
    cfg["models"]["mlp"].setdefault("kwargs", {})["width"] = 512
    write_config(work / "wide.yaml", cfg)
    return refused(opcost(tiny, "predict", "mlp", "--batch", "2", "--config", work / "wide.yaml", "--no-trace"),
                   ["model mlp", "another variant"])


@case("run: db show --shape 8,x", runs=("tiny",))
def _show_shape_x(work: Path) -> Verdict:
    return refused(opcost(RUNS.tiny(), "db", "show", "--shape", "8,x"), ["--shape 8,x"])


@case("run: db show --op with a misspelt op type", runs=("tiny",))
def _show_misspelt(work: Path) -> Verdict:
    return accepted(opcost(RUNS.tiny(), "db", "show", "--op", "Linaer"), "closest: Linear")


@case("run: predict an unknown torchvision name", runs=("tiny",))
def _predict_unknown(work: Path) -> Verdict:
    return refused(opcost(RUNS.tiny(), "predict", "resnet1800", "--batch", "2"), ["resnet1800"])


@case("run: predict a decode step past a decoder's positions", runs=("tiny",))
def _predict_past_positions(work: Path) -> Verdict:
    return refused(opcost(RUNS.tiny(), "predict", "hf:gpt2", "--batch", "1", "--mode", "decode", "--context", "5000",
                          "--no-trace"), ["model hf:gpt2: context 5000"])


@case("run: predict resnet18 at a batch whose activations exceed memory", runs=("tiny",))
def _predict_huge_batch(work: Path) -> Verdict:
    return refused(opcost(RUNS.tiny(), "predict", "resnet18", "--batch", "100000", "--no-trace"),
                   ["model resnet18: batch 100000"])


@case("run: predict from a database whose e2e table is gone", runs=("tiny",))
def _predict_without_e2e(work: Path) -> Verdict:
    shutil.copytree(RUNS.tiny() / "results" / "db", work / "db")
    (work / "db" / "e2e.parquet").unlink()
    done = opcost(work, "predict", "tiny_dlrm", "--batch", "2", "--db", "db", "--no-trace", "--json")
    if (bad := broke(done)) is not None or done.rc != 0:
        return bad or (BAD, f"rc {done.rc}: {short(gist(done.text))}")
    got = json.loads(done.out)
    if "e2e.parquet" not in done.err:
        return SILENT, "the missing e2e table is not named"
    if not got["high_s"] > got["low_s"]:
        return SILENT, f"an interval of zero width [{got['low_s']:.3g}, {got['high_s']:.3g}] with nothing timed"
    return GOOD, f"e2e.parquet named; [{got['low_s'] * 1e3:.3f}, {got['high_s'] * 1e3:.3f}] ms"


@case("run: db show --op Linear", runs=("tiny",))
def _show(work: Path) -> Verdict:
    return accepted(opcost(RUNS.tiny(), "db", "show", "--op", "Linear"), "Linear")


@case("run: db merge twice adds nothing", runs=("tiny",))
def _merge_twice(work: Path) -> Verdict:
    db = RUNS.tiny() / "results" / "db"
    first = opcost(work, "db", "merge", db, "--out", "merged")
    if (bad := broke(first)) is not None or first.rc != 0:
        return bad or (BAD, f"rc {first.rc}: {short(gist(first.text))}")
    once = tables_rows(work / "merged")
    second = opcost(work, "db", "merge", db, "--out", "merged")
    if (bad := broke(second)) is not None:
        return bad
    twice = tables_rows(work / "merged")
    source = tables_rows(db)
    if once != twice or any(once.get(t, 0) < n for t, n in source.items()):
        return SILENT, f"rows: source {source}, merged once {once}, twice {twice} (rc {second.rc})"
    return GOOD, f"rc 0 and {second.rc}; {sum(once.values())} rows once and twice"


@case("run: db merge of one model name in two dtypes", runs=("tiny",))
def _merge_two_variants(work: Path) -> Verdict:
    import pandas as pd

    db = RUNS.tiny() / "results" / "db"
    other = work / "bf16"
    other.mkdir()
    for table in db.glob("*.parquet"):
        df = pd.read_parquet(table)
        if table.stem == "layers":
            df["inputs"] = df["inputs"].str.replace('"float32"', '"bfloat16"')
        df.to_parquet(other / table.name)
    done = opcost(work, "db", "merge", db, other, "--out", "merged")
    if (work / "merged").exists():
        return SILENT, f"rc {done.rc}: merged, each model's variants mixed: {short(gist(done.text))}"
    return refused(done, ["bfloat16"])


@case("run: db merge into an existing database keeps its rows", runs=("tiny", "warnings"))
def _merge_into_database(work: Path) -> Verdict:
    tiny_db = RUNS.tiny() / "results" / "db"
    other, done = RUNS.get("warnings")
    if done.rc != 0:
        raise RunFailed(f"the warnings run failed (rc {done.rc}): {short(gist(done.text))}")
    shutil.copytree(other / "results" / "db", work / "existing")
    before = tables_rows(work / "existing")
    union = opcost(work, "db", "merge", other / "results" / "db", tiny_db, "--out", "union")
    if union.rc != 0:
        return BAD, f"merging both into a new directory failed (rc {union.rc}): {short(gist(union.text))}"
    want = tables_rows(work / "union")
    done = opcost(work, "db", "merge", tiny_db, "--out", "existing")
    after = tables_rows(work / "existing")
    if (bad := broke(done)) is not None:
        return bad
    if done.rc != 0:  # refusing it (without --force) keeps it too
        return refused(done, ["existing"]) if after == before else (SILENT, f"refused but rows {before} -> {after}")
    if after != want:
        lost = {t: f"{before.get(t, 0)}->{n} (both: {want.get(t, 0)})" for t, n in after.items() if n != want.get(t)}
        return SILENT, f"rc 0, rows of the existing database: {short(str(lost))}"
    return GOOD, f"rc 0, {sum(before.values())} rows kept, {sum(after.values())} after (as merging both anew)"


@case("run: db merge into a directory with other files", runs=("tiny",))
def _merge_into_other_dir(work: Path) -> Verdict:
    target = work / "papers"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    done = opcost(work, "db", "merge", RUNS.tiny() / "results" / "db", "--out", target)
    if sorted(p.name for p in target.iterdir()) != ["notes.txt"]:
        return SILENT, f"rc {done.rc}, wrote beside notes.txt: {sorted(p.name for p in target.iterdir())[:5]}"
    return refused(done, [str(target.name)])


def _keep(path: Path):
    """A copy of ``path`` (mtime kept) to put back with :func:`_put_back`."""
    kept = path.with_name(path.name + ".reliability-kept")
    shutil.copy2(path, kept)
    return kept


def _put_back(kept: Path) -> None:
    shutil.copy2(kept, kept.with_name(kept.name.removesuffix(".reliability-kept")))
    kept.unlink()


@case("run: a corrupt e2e.parquet read by db show", runs=("tiny",))
def _corrupt_table(work: Path) -> Verdict:
    tiny = RUNS.tiny()
    table = tiny / "results" / "db" / "e2e.parquet"
    kept = _keep(table)
    try:
        table.write_bytes(b"not parquet at all")
        done = opcost(tiny, "db", "show", "--db", "results/db")
    finally:
        _put_back(kept)
    verdict = refused(done, ["e2e.parquet"])
    if verdict[0] == GOOD and "--configfile" not in done.err:
        repair = done.err[done.err.find("snakemake "):].split(")")[0].strip() if "snakemake " in done.err else "none"
        return UNCLEAR, f"one line naming the file, but its repair command lacks --configfile: {short(repair)}"
    return verdict


def _warned(model: str, says: str) -> Verdict:
    work, done = RUNS.get("warnings")
    if (bad := broke(done)) is not None or done.rc != 0:
        return bad or (BAD, f"rc {done.rc}: {short(gist(done.text))}")
    path = work / "results" / "summary.txt"
    if not path.exists():
        return BAD, "rc 0 but no results/summary.txt"
    lines = [ln.strip() for ln in path.read_text().splitlines() if f"{model}/inference/b2" in ln and "warning" in ln]
    if not any(says in ln for ln in lines):
        return SILENT, f"no warning for {model} in the summary saying {says!r}" + (
            f" ({short(lines[0])})" if lines else "")
    return GOOD, short(next(ln for ln in lines if says in ln))


@case("run: a model whose output is NaN is warned of", runs=("warnings",))
def _nan_warned(work: Path) -> Verdict:
    return _warned("nan", "its output holds NaN")


@case("run: a model that changes its input in place is warned of", runs=("warnings",))
def _mutating_warned(work: Path) -> Verdict:
    return _warned("mutating", "in place")


@case("run: data-dependent control flow is warned of", runs=("warnings",))
def _control_flow_warned(work: Path) -> Verdict:
    return _warned("early_exit", "control flow")


@case("run: a run whose only model fails ends with its summary", runs=("broken",))
def _only_model_fails(work: Path) -> Verdict:
    work, done = RUNS.get("broken")
    if (bad := broke(done)) is not None:
        return bad
    path = work / "results" / "summary.txt"
    if done.rc != 0 or not path.exists():
        return BAD, f"rc {done.rc}, summary {'written' if path.exists() else 'missing'}: {short(gist(done.text))}"
    text = path.read_text()
    if "FAILED broken/inference/b2" not in text or "this factory always fails" not in text:
        return SILENT, "the summary does not name broken's failure"
    return GOOD, "rc 0; " + short(next(ln for ln in text.splitlines() if "FAILED broken" in ln))


# changing the shared run's results: last, in this order


@case("run: a deleted measurements.parquet is rebuilt by the same command", runs=("tiny",))
def _deleted_table(work: Path) -> Verdict:
    import pandas as pd

    tiny = RUNS.tiny()
    table = tiny / "results" / "db" / "measurements.parquet"
    rows = len(pd.read_parquet(table))
    kept = _keep(table)
    table.unlink()
    dry = snakemake(tiny, "-n", "--configfile", "c.yaml", "--cores", "1")
    again = snakemake(tiny, "--configfile", "c.yaml", "--cores", "1", timeout=RUN_S)
    if not table.exists():
        _put_back(kept)
        return BAD if again.rc else SILENT, f"rc {again.rc}, measurements.parquet still missing after the rerun"
    kept.unlink()
    for done in (dry, again):
        if (bad := broke(done)) is not None or done.rc != 0:
            return bad or (BAD, f"rc {done.rc}{' (dry run)' if done is dry else ''}: {short(gist(done.text))}")
    if (now := len(pd.read_parquet(table))) != rows:
        return SILENT, f"rebuilt with {now} rows, {rows} before"
    if "\ndatabase " not in dry.text and "rule database" not in dry.text:
        said = [ln for ln in dry.err.splitlines() if ln.startswith("opcost:")]
        return UNCLEAR, (f"rebuilt by the run ({rows} rows, as before), but its dry run lists no database job"
                         f"{' (Nothing to be done)' if 'Nothing to be done' in dry.text else ''}; it says: "
                         f"{short(' | '.join(said) or 'nothing')}")
    said = [ln for ln in again.err.splitlines() if "rebuilding them" in ln]
    if not said:
        return UNCLEAR, "rebuilt without saying so"
    return GOOD, f"rc 0, {rows} rows rebuilt in {again.seconds:.0f} s: {short(said[0])}"


@case("run: Snakemake's metadata deleted, then a dry run", runs=("tiny",))
def _metadata_lost(work: Path) -> Verdict:
    tiny = RUNS.tiny()
    meta = tiny / ".snakemake" / "metadata"
    kept = meta.with_name("metadata.reliability-kept")
    shutil.copytree(meta, kept)
    shutil.rmtree(meta)
    try:
        dry = snakemake(tiny, "-n", "--configfile", "c.yaml", "--cores", "1")
    finally:
        shutil.rmtree(meta, ignore_errors=True)
        kept.rename(meta)
    if (bad := broke(dry)) is not None:
        return bad
    said = [ln for ln in dry.err.splitlines() if ln.startswith("opcost: warning:") and "metadata" in ln]
    if not said:
        return SILENT, f"rc {dry.rc}, no word that changes and deletions can no longer be seen"
    return GOOD, short(said[0])


def _profile_outputs(tiny: Path) -> list[str]:
    """The profiling jobs' measurement tables (results/profile/iter{n}_chunk{c}.parquet), relative to the run."""
    return sorted(str(p.relative_to(tiny)) for p in (tiny / "results" / "profile").glob("iter*_chunk*.parquet"))


def _profiled(tiny: Path, output: str | None = None, since: float = 0.0) -> list[str]:
    """What each profiling job's log (``output``'s job's only; written since ``since``) says it measured: its SUMMARY
    line."""
    logs = [tiny / "logs" / "profile" / Path(output).with_suffix(".log").name] if output else sorted(
        (tiny / "logs" / "profile").glob("*.log"))
    return [ln.split("SUMMARY", 1)[1].strip() for p in logs if p.exists() and p.stat().st_mtime >= since
            for ln in p.read_text(errors="replace").splitlines() if "SUMMARY chunk" in ln]


def _remeasured(tiny: Path, done: Done, output: str | None = None) -> Verdict:
    """Good when ``done`` ended well and every profiling job it ran (``output``'s only) measured afresh."""
    if (bad := broke(done)) is not None or done.rc != 0:
        return bad or (BAD, f"rc {done.rc}: {short(gist(done.text))}")
    said = _profiled(tiny, output, since=done.started)
    resumed = [s for s in said if " 0 resumed from the journal" not in s]
    if not said:
        return BAD, "no profiling job ran (no log of this run says what it measured)"
    if resumed:
        return BAD, f"{len(resumed)} of {len(said)} profiling jobs resumed: {short(resumed[0])}"
    return GOOD, f"rc 0 in {done.seconds:.0f} s; {short(' | '.join(said))}"


@case("run: --forceall re-measures", runs=("tiny",))
def _forceall(work: Path) -> Verdict:
    """--forceall up to the profiling outputs: what a full --forceall reruns of profiling, minutes sooner (the
    invalid-journal case reruns what follows them)."""
    tiny = RUNS.tiny()
    outputs = _profile_outputs(tiny)
    return _remeasured(tiny, snakemake(tiny, "--configfile", "c.yaml", "--cores", "1", "--forceall", "--", *outputs,
                                       timeout=RUN_S))


@case("run: -R of a profiling output re-measures", runs=("tiny",))
def _rerun_profile(work: Path) -> Verdict:
    tiny = RUNS.tiny()
    output = _profile_outputs(tiny)[-1]
    done = snakemake(tiny, "--configfile", "c.yaml", "--cores", "1", "-R", output, "--", output, timeout=RUN_S)
    return _remeasured(tiny, done, output)


@case("run: a journal line of invalid bytes", runs=("tiny",))
def _bad_journal(work: Path) -> Verdict:
    """Bytes that are not UTF-8 appended to a completed profiling job's journal, then that job forced (-R) in a run
    of the same command: no traceback, and a forced job measures afresh."""
    tiny = RUNS.tiny()
    journals = sorted((tiny / "results" / "journal").glob("profile_iter*_chunk*.jsonl"))
    if not journals:
        return BAD, "no profiling journal in results/journal/ after a completed run"
    with open(journals[0], "ab") as f:
        f.write(b"\xff\xfe\n")
    job = re.match(r"profile_iter(\d+)_chunk(\d+)_", journals[0].name)
    output = f"results/profile/iter{job[1]}_chunk{job[2]}.parquet"
    done = snakemake(tiny, "--configfile", "c.yaml", "--cores", "1", "-R", output, timeout=RUN_S)
    if (bad := broke(done)) is not None:
        return bad
    logs = "".join(p.read_text(errors="replace") for p in (tiny / "logs" / "profile").glob("*.log"))
    if "Traceback (most recent call last)" in logs:
        return BAD, f"rc {done.rc}, a traceback in logs/profile/"
    if done.rc != 0:
        return refused(done, [journals[0].name])
    said = next((ln.split(" WARNING ")[-1] for ln in (logs + done.err).splitlines() if journals[0].name in ln),
                "nothing said of it")
    verdict, measured = _remeasured(tiny, done, output)
    if verdict != GOOD:
        return UNCLEAR, f"rc 0, no traceback, but the forced job did not measure afresh: {measured}; {short(said)}"
    return GOOD, f"{measured}; {short(said)}"


# ---------------------------------------------------------------------------------------------- main

def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)[:80].strip("_")


def _try(c: Case, out: Path) -> tuple[Case, str, str, float]:
    work = out / "cases" / _slug(c.name)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t0, _CASE.dir = time.perf_counter(), work
    try:
        verdict, detail = c.fn(work)
    except RunFailed as e:
        verdict, detail = BAD, str(e)
    except Exception as e:  # the case itself failed: the thing it tried left something unreadable
        verdict, detail = BAD, f"the case raised {type(e).__name__}: {short(e)} ({short(traceback.format_exc(-1))})"
    return c, verdict, detail, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="only the cases that need no run (under a minute)")
    ap.add_argument("--out", help="working directory (default: a new temporary one, deleted at the end)")
    ap.add_argument("--only", nargs="+", help="only the cases whose name holds one of these texts")
    ap.add_argument("--reuse", action="store_true", help="with --out: the runs of the workflow a previous call left "
                    "there, instead of new ones (to develop cases; the cases that rerun jobs have changed them)")
    ap.add_argument("--jobs", type=int, default=2, help="cases that need no run, run side by side (default 2)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    cases = [c for c in CASES if (c.smoke or not args.smoke) and (not args.only or any(t in c.name for t in args.only))]
    temp = None if args.out else tempfile.TemporaryDirectory(prefix="opcost-reliability-")
    out = Path(args.out or temp.name).resolve()
    out.mkdir(parents=True, exist_ok=True)
    global RUNS
    RUNS = Runs(out, args.reuse)

    width = max(len(c.name) for c in cases) if cases else 0
    counts = Counter()

    def report(c, verdict, detail, seconds):
        counts[verdict] += 1
        print(f"{c.name:<{width}}  {verdict:<14}  {detail}  [{seconds:.1f} s]", flush=True)

    alone = [c for c in cases if not c.runs]
    RUNS.start({name for c in cases for name in c.runs})
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for result in pool.map(lambda c: _try(c, out), alone):
            report(*result)
    for c in (c for c in cases if c.runs):
        report(*_try(c, out))
    print(" ".join(f"{v}={counts[v]}" for v in VERDICTS), flush=True)
    if temp is not None:
        temp.cleanup()
    summary(cases=len(cases), good=counts[GOOD], unclear=counts[UNCLEAR], bad=counts[BAD],
            silently_wrong=counts[SILENT], seconds=round(time.perf_counter() - t0, 1))


if __name__ == "__main__":
    main()
