"""Long runs never lose completed measurements: the journal, and a real `kill -9` of a running workflow."""
import json
import os
import signal
import subprocess
import time

import pandas as pd
import yaml

from opcost import stages
from opcost.config import validate
from opcost.journal import Journal
from tests.helpers import TINY, command


def test_journal_ignores_a_torn_last_line(tmp_path):
    j = Journal(tmp_path / "j.jsonl")
    j.append([{"config_id": "a", "median_s": 1.0}], [{"key": "a", "seconds": 1.0}])
    j.append([{"config_id": "b", "median_s": float("nan")}], [])
    with open(j.path, "a") as f:
        f.write('{"config_id": "c", "rows": [')  # killed mid-write
    rows, samples = j.load()
    assert [r["config_id"] for r in rows] == ["a", "b"] and rows[1]["median_s"] is None and len(samples) == 1
    assert j.load(keep_ids={"b"})[0] == [{"config_id": "b", "median_s": None}]


def _snakemake(args, cwd):
    """Snakemake in its own process group, so the test can kill -9 it with everything it started."""
    cmd, env = command(*args)
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def test_kill_9_mid_profiling_then_resume(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    del cfg["models"]["broken"]
    cfg["sweeps"] = []  # jobs the profiling job does not need
    cfg.pop("predict_only", None)
    cfg["profile"] = {"chunks": 1, "remeasure": 0, "rotation_size": 2,
                      "timing": {"max_seconds": 0.3, "target_rel_ci": 0.0001, "min_samples": 5, "warmup_s": 0.0}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    table = tmp_path / "results" / "profile" / "iter0_chunk0.parquet"  # the profiling job's output, nothing more
    args = ["--configfile", "c.yaml", "--cores", "1", str(table.relative_to(tmp_path))]
    proc = _snakemake(args, tmp_path)
    journals = tmp_path / "results" / "journal"
    deadline = time.time() + 240
    while time.time() < deadline:  # wait until some, not all, configurations are journaled
        lines = sum(len(p.read_text().splitlines()) for p in journals.glob("*.jsonl")) if journals.exists() else 0
        if lines >= 3:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert lines >= 3, "profiling never started"
    before = {}
    for p in journals.glob("*.jsonl"):
        for line in p.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not entry.get("e2e"):  # a configuration's entry (not a model iteration's)
                before[entry["config_id"]] = entry["rows"][0]["median_s"]
    configs = pd.read_parquet(tmp_path / "results" / "db" / "configs.parquet")
    assert 0 < len(before) < len(configs)
    assert not table.exists()

    _snakemake(["--configfile", "c.yaml", "--unlock"], tmp_path).communicate(timeout=120)  # kill -9 leaves a lock
    out, _ = _snakemake(args, tmp_path).communicate(timeout=600)
    log = (tmp_path / "logs" / "profile" / "iter0_chunk0.log").read_text()
    assert "already measured, resuming" in log, out[-2000:]
    meas = pd.read_parquet(table)
    iso = meas[(meas["source"] == "isolated") & (meas["phase"] == "forward") & (meas["placement"] == "default")]
    assert sorted(iso["config_id"]) == sorted(configs["config_id"])  # complete, and no duplicates
    kept = iso.set_index("config_id")["median_s"]
    assert all(kept[cid] == med for cid, med in before.items())  # journaled work was not re-measured


def test_profile_stage_skips_journaled_configurations(tmp_path):
    cfg = validate(yaml.safe_load(TINY.read_text()))
    cfg["profile"]["chunks"] = 1
    layers = tmp_path / "layers.parquet"
    stages.extract(cfg, "mlp", "inference", 2, layers)
    stages.make_catalog([layers], tmp_path / "configs.parquet")
    first = stages.profile(cfg, tmp_path / "configs.parquet", 0, 0, None, tmp_path / "m1.parquet",
                           tmp_path / "s1.parquet", tmp_path / "e1.parquet", journal_dir=tmp_path / "j")
    second = stages.profile(cfg, tmp_path / "configs.parquet", 0, 0, None, tmp_path / "m2.parquet",
                            tmp_path / "s2.parquet", tmp_path / "e2.parquet", journal_dir=tmp_path / "j")
    cols = ["config_id", "phase", "median_s", "timestamp"]
    pd.testing.assert_frame_equal(first[cols].sort_values(cols).reset_index(drop=True),
                                  second[cols].sort_values(cols).reset_index(drop=True))
    s1, s2 = (pd.read_parquet(tmp_path / f"s{k}.parquet") for k in (1, 2))
    assert len(s2) == len(s1)  # every operator sample back from the journal, and the model iteration's
    # the model iteration timed in the first job's rotation is the resumed job's reference too (it had nothing left
    # to rotate): a resumed run keeps the reference its journaled costs were measured against
    e1, e2 = (pd.read_parquet(tmp_path / f"e{k}.parquet") for k in (1, 2))
    assert e1["method"].tolist() == ["rotation"] and len(s1[s1["source"] == "e2e"]) == e1["n"].iloc[0]
    pd.testing.assert_frame_equal(e1, e2)
