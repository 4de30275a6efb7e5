"""Cluster submission: the SLURM profile passes a dry run; a real run through a cluster executor completes."""
import shutil

import pandas as pd
import yaml

from tests.helpers import ROOT, TINY, snakemake


def test_slurm_profile_dry_run(tmp_path):
    shutil.copytree(ROOT / "config", tmp_path / "config")
    proc = snakemake("--workflow-profile", str(ROOT / "profiles" / "slurm"), "-n", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert "profiles/slurm" in out and "extract" in out and "Error" not in out


def test_cluster_generic_executor_runs_the_tiny_config(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    cfg["models"] = {"mlp": cfg["models"]["mlp"]}
    cfg["profile"]["chunks"] = 1
    cfg.update(sweeps=[], placement={"tiers": {}})  # the catalog then needs mlp's extraction alone
    cfg.pop("predict_only", None)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    # a chain of submitted jobs (extract -> catalog) and a measuring job; the whole pipeline runs in test_workflow
    snakemake("--configfile", "c.yaml", "--executor", "cluster-generic", "--jobs", "1",
              "--cluster-generic-submit-cmd", str(ROOT / "tests" / "fake_submit.sh"), "--latency-wait", "5",
              "results/db/configs.parquet", "results/e2e/mlp/inference_b2.parquet", cwd=tmp_path, timeout=600)
    configs = pd.read_parquet(tmp_path / "results" / "db" / "configs.parquet")
    e2e = pd.read_parquet(tmp_path / "results" / "e2e" / "mlp" / "inference_b2.parquet")
    assert set(configs["op_type"]) >= {"Linear"} and (e2e["median_s"] > 0).all() and list(e2e["model"]) == ["mlp"] * 2
    assert list(e2e["method"]) == ["dedicated", "plain"]  # the plain process started from the submitted job too


def test_the_conda_environment_of_the_slurm_recipe_holds_every_dependency_and_nvml():
    """envs/opcost.yaml (`--sdm conda` on a cluster) installs every dependency of pyproject.toml, and NVML's
    binding, which config/gpu.yaml's energy meter needs on the GPU nodes."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "envs" / "opcost.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert set(project["dependencies"]) | set(project["optional-dependencies"]["nvml"]) <= set(pip)
