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
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    snakemake("--configfile", "c.yaml", "--executor", "cluster-generic", "--jobs", "1",
              "--cluster-generic-submit-cmd", str(ROOT / "tests" / "fake_submit.sh"), "--latency-wait", "5",
              "results/validation/predictions.parquet", cwd=tmp_path, timeout=600)
    pred = pd.read_parquet(tmp_path / "results" / "validation" / "predictions.parquet")
    assert set(pred["model"]) == {"mlp"} and (pred["predicted_s"] > 0).all()
