"""Long runs never lose completed measurements: the journal, and a real `kill -9` of a running workflow."""
import json
import logging
import os
import re
import signal
import subprocess
import time

import pandas as pd
import pytest
import yaml

from opcost import stages
from opcost.config import validate
from opcost.errors import OpcostError
from opcost.journal import Journal
from tests.helpers import TINY, command, snakemake


def test_journal_ignores_a_torn_last_line(tmp_path):
    j = Journal(tmp_path / "j.jsonl")
    j.append([{"config_id": "a", "median_s": 1.0}], [{"key": "a", "seconds": 1.0}])
    j.append([{"config_id": "b", "median_s": float("nan")}], [])
    with open(j.path, "a") as f:
        f.write('{"config_id": "c", "rows": [')  # killed mid-write
    rows, samples = j.load()
    assert [r["config_id"] for r in rows] == ["a", "b"] and rows[1]["median_s"] is None and len(samples) == 1
    assert j.load(keep_ids={"b"})[0] == [{"config_id": "b", "median_s": None}]
    j.append([{"config_id": "c", "median_s": 3.0}], [])  # the resumed job's entry starts on a line of its own
    assert [r["config_id"] for r in j.load()[0]] == ["a", "b", "c"] and not j.completed()
    j.complete()
    assert j.completed() and len(j.load()[0]) == 3


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
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
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


def _catalog(tmp_path, **timing):
    """The tiny mlp's configurations, and the validated config that profiles them in one chunk."""
    cfg = validate(yaml.safe_load(TINY.read_text()))
    cfg["profile"]["chunks"] = 1
    cfg["profile"]["timing"].update(timing)
    layers = tmp_path / "layers.parquet"
    stages.extract(cfg, "mlp", "inference", 2, layers)
    stages.make_catalog([layers], tmp_path / "configs.parquet")
    return cfg


def _profile(cfg, tmp_path, run, out_measurements=None):
    """One profiling job on the catalogue of :func:`_catalog`, its outputs named after ``run``."""
    return stages.profile(cfg, tmp_path / "configs.parquet", 0, 0, None,
                          out_measurements or tmp_path / f"m{run}.parquet", tmp_path / f"s{run}.parquet",
                          tmp_path / f"e{run}.parquet", journal_dir=tmp_path / "j")


def _interrupted(cfg, tmp_path):
    """A profiling job that measured everything and then failed writing its measurements (a real OS error: their
    folder is a file), as a job killed at its end leaves its journal."""
    (tmp_path / "blocked").write_text("a file where a folder should be")
    with pytest.raises(OSError):
        _profile(cfg, tmp_path, 1, out_measurements=tmp_path / "blocked" / "m1.parquet")
    (journal,) = (tmp_path / "j").glob("*.jsonl")
    assert not Journal(journal).completed()
    return journal


def _summary(caplog) -> str:
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("SUMMARY")]
    return line


def test_a_profiling_job_resumes_its_interrupted_run_and_a_rerun_measures_afresh(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    cfg = _catalog(tmp_path)
    journal = _interrupted(cfg, tmp_path)
    n = len(pd.read_parquet(tmp_path / "configs.parquet"))
    caplog.clear()
    resumed = _profile(cfg, tmp_path, 2)  # the interrupted run, resumed: nothing measured again
    assert f": {n} configurations: 0 measured now, {n} resumed from the journal" in _summary(caplog)
    assert Journal(journal).completed()
    s1, s2 = (pd.read_parquet(tmp_path / f"s{k}.parquet") for k in (1, 2))
    assert len(s2) == len(s1)  # every operator sample back from the journal, and the model iteration's
    # the model iteration timed in the first job's rotation is the resumed job's reference too (it had nothing left
    # to rotate): a resumed run keeps the reference its journaled costs were measured against
    e1, e2 = (pd.read_parquet(tmp_path / f"e{k}.parquet") for k in (1, 2))
    assert e1["method"].tolist() == ["rotation"] and len(s1[s1["source"] == "e2e"]) == e1["n"].iloc[0]
    pd.testing.assert_frame_equal(e1, e2)

    # the job rerun unforced once it completed (its outputs deleted, its catalogue made again the same): the
    # completed run reused whole, nothing measured, nothing mixed
    caplog.clear()
    again = stages.profile(cfg, tmp_path / "configs.parquet", 0, 0, None, tmp_path / "m9.parquet",
                           tmp_path / "s9.parquet", tmp_path / "e9.parquet", journal_dir=tmp_path / "j", forced=False)
    assert f": {n} configurations: 0 measured now, {n} resumed from the journal" in _summary(caplog)
    assert "reused whole" in caplog.text
    pd.testing.assert_frame_equal(again, resumed)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "e9.parquet"), e2)

    # the job forced to rerun once it completed (snakemake --forceall, -R): every row measured afresh
    caplog.clear()
    time.sleep(1.1)  # timestamps are to the second
    fresh = _profile(cfg, tmp_path, 3)
    assert f": {n} configurations: {n} measured now, 0 resumed from the journal" in _summary(caplog)
    assert (f"journal {journal}: of a run that completed, forced to run again: discarded, measuring afresh"
            in caplog.text)
    assert fresh["timestamp"].min() > resumed["timestamp"].max()
    e3 = pd.read_parquet(tmp_path / "e3.parquet")
    assert e3["timestamp"].min() > e2["timestamp"].max()  # the rotation's reference too
    assert sorted(fresh["config_id"]) == sorted(resumed["config_id"])


def test_a_changed_timing_setting_measures_afresh(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    cfg = _catalog(tmp_path)
    old = _interrupted(cfg, tmp_path)
    cfg["profile"]["timing"]["min_samples"] += 1
    caplog.clear()
    meas = _profile(cfg, tmp_path, 2)
    assert "0 resumed from the journal" in _summary(caplog) and len(meas)
    assert f"journal {old}: of this job's run with other settings: discarded" in caplog.text
    assert not old.exists() and len(list((tmp_path / "j").glob("*.jsonl"))) == 1


def test_a_journal_line_with_invalid_bytes_is_skipped_with_a_warning(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    cfg = _catalog(tmp_path)
    journal = _interrupted(cfg, tmp_path)
    lines = journal.read_bytes().splitlines(keepends=True)
    damaged = next(k for k, ln in enumerate(lines) if b'"config_id"' in ln)
    lost = json.loads(lines[damaged])["config_id"]
    lines[damaged] = lines[damaged].replace(b'"rows"', b'"r\xff\xfews"')  # not UTF-8 (a disk error, a bad copy)
    journal.write_bytes(b"".join(lines))
    caplog.clear()
    meas = _profile(cfg, tmp_path, 2)
    n = meas["config_id"].nunique()
    assert f"{n} configurations: 1 measured now, {n - 1} resumed from the journal" in _summary(caplog)
    warning = f"journal {journal}: line {damaged + 1} skipped, damaged (bytes that are not UTF-8)"
    assert warning in caplog.text
    iso = meas[(meas["phase"] == "forward") & (meas["placement"] == "default")]
    assert iso["config_id"].is_unique and lost in set(iso["config_id"])  # measured again, once


def test_a_completed_journal_damaged_afterwards_is_still_completed(tmp_path):
    journal = Journal(tmp_path / "j.jsonl")
    journal.append([{"config_id": "c1", "median_s": 1e-3}], [])
    journal.complete()
    with open(journal.path, "ab") as f:
        f.write(b"\xff\xfe damage after the mark\n")  # a forced rerun must still measure afresh
    assert journal.completed()


def test_a_journal_that_cannot_be_used_is_one_line_naming_it(tmp_path):
    cfg = _catalog(tmp_path)
    journal = _interrupted(cfg, tmp_path)
    entries = [json.loads(ln) for ln in journal.read_text().splitlines()]
    for entry in entries:
        for row in entry["rows"]:
            row.pop("median_s", None)  # rows of another opcost version's table
    journal.write_text("".join(json.dumps(e) + "\n" for e in entries))
    with pytest.raises(OpcostError) as err:
        _profile(cfg, tmp_path, 2)
    assert str(err.value).startswith(f"journal {journal}: holds rows this opcost cannot read (")
    assert str(err.value).endswith("delete it and rerun (the configurations it holds are measured again)")
    journal.unlink()
    journal.mkdir()  # a folder in its place
    with pytest.raises(OpcostError, match=rf"^journal {re.escape(str(journal))}: unreadable \(Is a directory\): "
                                          r"delete it and rerun"):
        _profile(cfg, tmp_path, 2)


def test_a_rerun_redoes_a_profiling_job_that_failed(tmp_path):
    """A forced rerun re-measures; and when it fails in the profiling job (Snakemake deletes the job's outputs), a
    plain rerun redoes the job: Snakemake by itself said "Nothing to be done", the files made from the deleted ones
    (the loop's evaluation, the database) being there and up to date."""
    cfg = yaml.safe_load(TINY.read_text())
    cfg["models"] = {"mlp": cfg["models"]["mlp"]}
    cfg["sweeps"] = []  # jobs the evaluation does not need
    cfg.pop("predict_only", None)
    cfg["profile"]["chunks"] = 1
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    table = tmp_path / "results" / "profile" / "iter0_chunk0.parquet"
    log = tmp_path / "logs" / "profile" / "iter0_chunk0.log"
    force = ["-R", str(table.relative_to(tmp_path))]

    def run(*args, check=True):  # up to the loop's evaluation, made from the profiling job's outputs
        return snakemake("--configfile", "c.yaml", "--cores", "1", "results/loop/iter0/evaluation.json", *args,
                         cwd=tmp_path, check=check)

    run()
    first = pd.read_parquet(table)["timestamp"]
    time.sleep(1.1)  # timestamps are to the second
    run(*force)
    assert re.search(r": (\d+) configurations: \1 measured now, 0 resumed from the journal", log.read_text())
    assert pd.read_parquet(table)["timestamp"].min() > first.max()

    (journal,) = (tmp_path / "results" / "journal").glob("*.jsonl")
    journal.unlink()
    journal.mkdir()  # a journal that cannot be read
    failed = run(*force, check=False)
    assert failed.returncode != 0 and not table.exists()
    assert (f"opcost: journal {journal.relative_to(tmp_path)}: unreadable (Is a directory): delete it and rerun "
            "(the configurations it holds are measured again)") in failed.stdout + failed.stderr
    journal.rmdir()  # the fix the error names
    rerun = run()
    assert "the last run of 1 job(s) did not complete (profile_chunk-0_n-0): they are redone" in rerun.stderr
    assert "the last run of this job did not complete: redoing it" in log.read_text() and table.exists()
    assert "Nothing to be done" in run().stderr  # and once redone, it is done


def test_a_workload_added_after_a_completed_run_measures_only_its_new_configurations(tmp_path, caplog):
    """A batch size added to a model after its profiling job completed: the job reruns (its catalogue changed) and
    measures the new workload's configurations only; what the completed run measured at the same settings is kept
    as it was."""
    caplog.set_level(logging.INFO)
    cfg = _catalog(tmp_path)
    first = stages.profile(cfg, tmp_path / "configs.parquet", 0, 0, None, tmp_path / "m1.parquet",
                           tmp_path / "s1.parquet", tmp_path / "e1.parquet", journal_dir=tmp_path / "j", forced=False)
    old = set(first["config_id"])
    stages.extract(cfg, "mlp", "inference", 3, tmp_path / "layers3.parquet")
    stages.make_catalog([tmp_path / "layers.parquet", tmp_path / "layers3.parquet"], tmp_path / "configs.parquet")
    new = set(pd.read_parquet(tmp_path / "configs.parquet")["config_id"]) - old
    assert new
    caplog.clear()
    second = stages.profile(cfg, tmp_path / "configs.parquet", 0, 0, None, tmp_path / "m2.parquet",
                            tmp_path / "s2.parquet", tmp_path / "e2.parquet", journal_dir=tmp_path / "j", forced=False)
    n = len(old | new)
    assert f"{n} configurations: {len(new)} measured now, {len(old)} resumed from the journal" in _summary(caplog)
    kept = second[second["config_id"].isin(old)].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, first.reset_index(drop=True))
    assert set(second["config_id"]) == old | new


def test_a_changed_model_keeps_none_of_its_old_iterations_in_a_resumed_profiling_job(tmp_path, caplog):
    """A model whose entry changed after its profiling job completed (another width: other configurations): the job
    reruns at the same settings, and the model iterations its rotations timed of the old model are left out of its
    end-to-end rows (the reference of the new model's costs), never kept beside the new ones."""
    caplog.set_level(logging.INFO)
    cfg = _catalog(tmp_path)
    stages.profile(cfg, tmp_path / "configs.parquet", 0, 0, None, tmp_path / "m1.parquet", tmp_path / "s1.parquet",
                   tmp_path / "e1.parquet", journal_dir=tmp_path / "j", forced=False)
    e1 = pd.read_parquet(tmp_path / "e1.parquet")
    assert len(e1) and set(e1["method"]) == {"rotation"}
    cfg["models"]["mlp"]["kwargs"]["width"] = 20
    stages.extract(cfg, "mlp", "inference", 2, tmp_path / "layers.parquet")
    stages.make_catalog([tmp_path / "layers.parquet"], tmp_path / "configs.parquet")
    time.sleep(1.1)  # timestamps are to the second
    stages.profile(cfg, tmp_path / "configs.parquet", 0, 0, None, tmp_path / "m2.parquet", tmp_path / "s2.parquet",
                   tmp_path / "e2.parquet", journal_dir=tmp_path / "j", forced=False)
    e2, s2 = pd.read_parquet(tmp_path / "e2.parquet"), pd.read_parquet(tmp_path / "s2.parquet")
    assert len(e2) and pd.to_datetime(e2["timestamp"]).min() > pd.to_datetime(e1["timestamp"]).max(), e2
    assert len(s2[s2["source"] == "e2e"]) == int(e2["n"].sum())  # no sample of the old model's iterations
    assert "the model iterations of mlp/inference/b2 left out: the workload changed" in caplog.text


def test_an_alone_job_rerun_on_its_remade_layers_reuses_its_completed_run_unless_forced(tmp_path, caplog):
    """A layers file deleted and made again the same reruns the workload's alone job: its completed journal
    serves, nothing is timed again; a forced rerun times afresh."""
    caplog.set_level(logging.INFO)
    cfg = _catalog(tmp_path)
    outs = [tmp_path / f"{k}.parquet" for k in ("a1", "s1", "a2", "s2", "a3", "s3")]
    for (out, smp), forced in zip(zip(outs[::2], outs[1::2]), (False, False, True)):
        time.sleep(1.1 if forced else 0)  # timestamps are to the second
        caplog.clear()
        stages.alone(cfg, "mlp", "inference", 2, tmp_path / "layers.parquet", out, smp, journal_dir=tmp_path / "j",
                     forced=forced)
    a1, a2, a3 = (pd.read_parquet(p) for p in outs[::2])
    pd.testing.assert_frame_equal(a1, a2)
    pd.testing.assert_frame_equal(*(pd.read_parquet(p) for p in outs[1:4:2]))
    assert "forced to run again: discarded" in caplog.text
    assert a3["timestamp"].min() > a1["timestamp"].max() and sorted(a3["config_id"]) == sorted(a1["config_id"])
