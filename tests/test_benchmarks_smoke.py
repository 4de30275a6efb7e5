"""The benchmark scripts run as documented: each one's --smoke mode (tiny inputs, the same code path as a full run), in
a process of its own, ending with its SUMMARY line, so that a change that breaks a benchmark fails here (every script
in benchmarks/ has one, or says why not); and the GPU check (`make gpu-check`) as far as a host without a GPU can run
it: its dry run, the workflow command it prints run with -n, and its digest of a finished run."""
import math
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import ROOT, TINY, command

BENCHMARKS = ROOT / "benchmarks"
NOT_BENCHMARKS = {"accuracy_table", "gpu_digest"}  # the accuracy table's generator; gpu_check.sh's digest
WITHOUT_SMOKE = {}  # benchmark -> why it has no --smoke run


def _finite(found: dict, *keys: str) -> bool:
    return all(math.isfinite(float(found[k])) for k in keys)


# benchmark -> (arguments after --smoke, what its SUMMARY line must say); {db}: the database of the tiny run the suite
# shares, {tmp}: a folder of its own. Costliest first (CPU seconds on this 2-core VM, about): two run side by side.
SMOKE = {
    # two families x batches 1 and 3 at context 16; the first model at 64 and 256 (b1, b3), at b2 (context 16)
    # and at both
    "decode": ([], lambda s: s["workloads"] == "4" and s["extrapolated"] == "6" and _finite(
        s, "median_abs_err_rot", "median_abs_err_ded", "median_abs_err_context", "median_abs_err_context16",
        "median_abs_err_batch",
        "median_abs_err_both", "median_abs_err_extrap_now")),  # 40 s
    # a one-layer llama's decode step and prefill at 16; generate() of 8 and 16 tokens from prompts of 12 and 40
    "generate": ([], lambda s: s["questions"] == "2" and _finite(s, "median_abs_err", "median_abs_err_ttft",
                                                                 "median_abs_err_tpot")),  # 20 s
    "zoo": ([], lambda s: s["models"] == s["passed"] == "3" and s["replay_failures"] == "0"
            and s["workload_failures"] == "0"),  # 13 s
    "transformer_accuracy": ([], lambda s: int(s["workloads"]) >= 1 and _finite(s, "median_abs_err_rot",
                                                                                "median_abs_err_ded")),  # 11 s
    "reliability": (["--out", "{tmp}"], lambda s: s["cases"] == "6" and s["bad"] == "0"
                    and s["silently_wrong"] == "0"),  # 10 s
    "profiling_efficiency": ([], lambda s: s["configs"] == "3" and _finite(s, "warm_wall_ratio", "fresh_wall_ratio",
                                                                         "warm_p90", "fresh_p90")),  # 5 s
    "prediction_accuracy": ([], lambda s: s["workloads"] == "1" and _finite(s, "median_abs_err_isolated",
                                                                          "median_abs_err_insitu")),  # 5 s
    "insitu_clock": ([], lambda s: s["workloads"] == "2" and _finite(s, "median_abs_err_events",
                                                                   "median_abs_err_sync")),  # 4 s
    "training_split": ([], lambda s: s["model"] == "tiny_dlrm" and float(s["isolated_ms"]) > 0
                       and float(s["insitu_ms"]) > 0),  # 4 s
    "autograd_engine": ([], lambda s: float(s["alone_us"]) > 0 and _finite(s, "engine_us", "chained_us")),  # 3 s
    "carried_inputs": ([], lambda s: s["workloads"] == "1" and _finite(
        s, "median_abs_err_update_carried", "median_abs_err_update_rewritten")),  # 11 s
    "warm_jobs": ([], lambda s: s["rounds"] == "1" and float(s["job_warm_s"]) > 0
                  and _finite(s, "job_cold_s", "worst_ratio_dev")),  # 15 s
    "dag_scale": ([], lambda s: float(s["dry_run_s_100"]) > 0 and float(s["again_s_100"]) > 0),  # 8 s
    "sweep_reproducibility": ([], lambda s: s["configs"] == "3" and _finite(s, "p50_1", "p50_2", "pass_s_2")),  # 6 s
    "advise_scale": ([], lambda s: s["solve_s_100"] != "nan" and float(s["best_vs_greedy"]) <= 1.0 + 1e-9),  # 1 s
    # on the tiny run's database: started once the tiny run is there
    "transformer_unseen": (["--db", "{db}"], lambda s: s["workloads"] == "1" and s["failed"] == "0"
                           and _finite(s, "median_abs_err", "median_width", "median_abs_est_vs_all",
                                       "median_abs_err_all")),  # 20 s
    "unseen_random": (["--db", "{db}"], lambda s: s["models"] == "2" and s["failed"] == "0"
                      and _finite(s, "median_abs_err", "median_width")),  # 15 s
    "generalisation": (["--db", "{db}"], lambda s: int(s["workloads"]) >= 1
                       and _finite(s, "median_abs_err_model")),  # 9 s
    "sweep_sampling": (["--db", "{db}"], lambda s: s["points"] == "3" and s["budget"] == "1"
                       and _finite(s, "uncertain_median", "random_median", "none_median", "all_median")),  # 5 s
}


def _smoke(name: str, db, tmp) -> subprocess.CompletedProcess:
    """One benchmark's smoke run, in a process of its own (``db``: the tiny run's database, or the exception that
    stopped the tiny run)."""
    if isinstance(db, BaseException):
        raise db
    args = [str(db) if a == "{db}" else str(tmp) if a == "{tmp}" else a for a in SMOKE[name][0]]
    # a check, not a measurement: no record, and one OpenMP thread (scikit-learn's trees spin their threads on a busy
    # 2-core machine: generalisation's smoke took 55 s of CPU with the default, 9 s with one; torch's threads are
    # the benchmarks' own --threads)
    env = {**{k: v for k, v in os.environ.items() if k != "OPCOST_RECORD"}, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, f"benchmarks/{name}.py", "--smoke", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def smoke_runs(request, tmp_path_factory):
    """The smoke runs of the benchmarks this session selected, two at a time (the VM's two cores), started at the
    first test that reads one: name -> future of its finished process. Those on the tiny run's database start once
    the tiny run is there (it runs beside the others)."""
    names = [item.callspec.params["name"] for item in request.session.items
             if getattr(item, "originalname", "") == "test_benchmark_smoke_ends_with_its_summary"]
    pool = ThreadPoolExecutor(2)
    runs = {n: pool.submit(_smoke, n, None, tmp_path_factory.mktemp(n)) for n in names if "{db}" not in SMOKE[n][0]}
    later = [n for n in names if n not in runs]
    if later:
        try:
            db = request.getfixturevalue("tiny_run") / "results" / "db"
        except Exception as e:  # the tests on its database fail with it; the others go on
            db = e
        runs.update({n: pool.submit(_smoke, n, db, tmp_path_factory.mktemp(n)) for n in later})
    yield runs
    pool.shutdown(cancel_futures=True)


def test_every_benchmark_has_a_smoke_run_here():
    scripts = {p.stem for p in BENCHMARKS.glob("*.py") if not p.stem.startswith("_")} - NOT_BENCHMARKS
    assert scripts - set(WITHOUT_SMOKE) == set(SMOKE)
    for name in SMOKE:
        assert "--smoke" in (BENCHMARKS / f"{name}.py").read_text(), name


@pytest.mark.parametrize("name", list(SMOKE))
def test_benchmark_smoke_ends_with_its_summary(name, smoke_runs):
    proc = smoke_runs[name].result()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("SUMMARY "), proc.stdout[-3000:]
    found = dict(kv.split("=", 1) for kv in last.split()[1:])
    assert SMOKE[name][1](found), last


def _gpu_check(*args, env=None):
    return subprocess.run(["bash", "benchmarks/gpu_check.sh", "--dry-run", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHON": sys.executable, **(env or {})})


def _commands(out: str) -> list[list[str]]:
    return [shlex.split(line[2:]) for line in out.splitlines() if line.startswith("+ ")]


def _module(cmd: list[str]) -> str | None:
    """The module a `python -m MODULE` command runs."""
    return cmd[cmd.index("-m") + 1] if "-m" in cmd else None


def test_gpu_check_installs_nvml_for_its_config_and_runs_under_its_own_folder(tmp_path):
    """On a fresh GPU host the check's config (NVML energy) needs the nvml extra: the dry run says it installs it
    (unless pynvml imports already); the workflow runs in OUTDIR, never in the repository's results/."""
    import importlib.util

    out = tmp_path / "check"
    proc = _gpu_check(str(out), "300", "60")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cmds = _commands(proc.stdout)
    installs = [c for c in cmds if _module(c) == "pip"]
    if importlib.util.find_spec("pynvml") is None:
        assert installs and installs[0][-2:] == ["-e", f"{ROOT}[nvml]"], proc.stdout
    else:
        assert not installs and "pynvml imports" in proc.stdout, proc.stdout
    smk = next(c for c in cmds if _module(c) == "snakemake")
    assert smk[smk.index("--directory") + 1] == str(out)
    assert smk[smk.index("--configfile") + 1] == str(ROOT / "tests" / "data" / "gpu.yaml")
    assert smk[:3] == ["timeout", "300", sys.executable]
    written = [c[c.index(">") + 1] for c in cmds if ">" in c] + [c[2] for c in cmds if c[0] == "tar"]
    assert written and all(p.startswith(str(out) + "/") for p in written), written
    assert not out.exists()  # a dry run writes nothing
    auto = tmp_path / "auto.yaml"  # no energy key: the meter is auto, which is NVML on a CUDA device
    auto.write_text("models: {resnet18: {}}\ndevice: cuda\n")
    modules = [m for m in map(_module, _commands(_gpu_check("--config", str(auto), str(out)).stdout)) if m]
    assert modules[0] == ("pip" if installs else "snakemake"), modules

    # a config whose energy meter needs no NVML installs nothing; the workflow command it prints is one Snakemake
    # accepts: its dry run, on a CPU config, builds the DAG and writes only under OUTDIR
    proc = _gpu_check("--config", str(TINY), str(out), env={"SKIP_TESTS": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cmds = _commands(proc.stdout)
    assert [_module(c) for c in cmds if _module(c)] == ["snakemake"], proc.stdout  # no pip, no pytest
    smk = next(c for c in cmds if _module(c) == "snakemake")
    smk = smk[2:smk.index(">")]  # without timeout and the redirection
    _, env = command()
    before = {p: (ROOT / p).exists() for p in (".snakemake", "results", "logs")}
    dry = subprocess.run([*smk[:-2], "-n", "--quiet", *smk[-2:]], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert (out / ".snakemake").is_dir() and {p: (ROOT / p).exists() for p in before} == before


def test_gpu_digest_reads_a_finished_run(tiny_run):
    """The check's digest (benchmarks/gpu_digest.py) reads every table a run writes; on the tiny run (CPU, no
    energy meter) it shows its measurements, placements and predictions, and no stage it reads is unreadable."""
    proc = subprocess.run([sys.executable, "benchmarks/gpu_digest.py", str(tiny_run / "results")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sections = proc.stdout.split("--- ")[1:]
    shown = {s.split(" (")[0]: s for s in sections}
    for title in ("tiers", "measurements", "placements", "predictions", "unseen"):
        assert "unavailable" not in shown[title], shown[title]
    assert sections[-1].startswith("figures:") and "breakdown.png" in sections[-1], sections[-1]
