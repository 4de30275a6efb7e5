"""Bad input and faults: each is one line naming the culprit (and the remedy), and completed work is kept.

Cases that need a completed run use the shared tiny run; the rest run the library or the CLI directly."""
import errno
import logging
import os
import shutil
import subprocess
import sys

import pytest
import torch
import yaml

from opcost import io, stages, tables
from opcost.config import validate
from opcost.errors import OpcostError, from_os_error
from opcost.model.sources import load_model
from opcost.model.workload import make_workload
from tests.helpers import TINY, snakemake

MLP = {"model": "tests.tiny_models:make_mlp", "input_shapes": [[8]]}


def _cli(*args):
    """The opcost command in a process of its own: (exit code, stdout, stderr)."""
    p = subprocess.run([sys.executable, "-m", "opcost.cli", *map(str, args)], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def _one_line(stderr: str) -> str:
    """The error: one line starting with `opcost:` (log lines of the work done before may precede it)."""
    errors = [ln for ln in stderr.splitlines() if ln.startswith("opcost:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    return errors[0]


def test_a_profiling_chunk_with_nothing_to_measure_is_normal(tmp_path, caplog):
    cfg = validate({"models": {"mlp": MLP}, "threads": 1, "affinity": "none", "batch_sizes": [2],
                    "loop": {"initial_op_types": ["Conv3d"]}})  # a type no workload has
    stages.extract(cfg, "mlp", "inference", 2, tmp_path / "l.parquet")
    stages.make_catalog([tmp_path / "l.parquet"], tmp_path / "c.parquet")
    with caplog.at_level(logging.INFO, logger="opcost"):
        meas = stages.profile(cfg, tmp_path / "c.parquet", 0, 0, None, tmp_path / "m.parquet", tmp_path / "s.parquet",
                              tmp_path / "e.parquet", journal_dir=tmp_path / "j")
    assert meas.empty and io.read_parquet(tmp_path / "m.parquet", tables.MEASUREMENTS).empty
    assert "config: loop.initial_op_types: no workload has operator type(s) Conv3d" in caplog.text
    assert "SUMMARY chunk 0: 0 configurations" in caplog.text


def test_an_impossible_batch_names_the_model_and_batch():
    with pytest.raises(OpcostError) as e:
        make_workload(load_model("mlp", MLP), 10 ** 12, "inference")
    assert str(e.value).startswith("model mlp: inference at batch 1000000000000 with inputs [] failed: ")
    assert "\n" not in str(e.value)


def test_an_integer_output_in_training_names_the_model():
    with pytest.raises(OpcostError, match=r"^model ints: training needs a differentiable output, but the model "
                                          r"returned no floating-point output \(Tensor\)$"):
        make_workload(load_model("ints", {"model": "torch.nn:Flatten", "input_dtype": "int64", "input_shapes": [[4]]}),
                      2, "training")


def test_more_threads_than_cpus_measure_with_the_cpus_there_are(caplog):
    cfg = validate({"models": {"mlp": MLP}, "threads": 1000, "affinity": "none"})
    with caplog.at_level(logging.WARNING, logger="opcost"):
        stages.prepare_process(cfg)
    cpus = len(os.sched_getaffinity(0))
    assert torch.get_num_threads() == cpus  # what the rows record (host_facts) is what ran
    assert f"config: threads: 1000 requested but this process may run on {cpus} CPU(s)" in caplog.text


def test_a_corrupt_table_names_the_file_and_how_to_rebuild_it(tmp_path):
    bad = tmp_path / "measurements.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(OpcostError) as e:
        io.read_parquet(bad, tables.MEASUREMENTS)
    msg = str(e.value)
    assert msg.startswith(f"{bad}: unreadable (") and f"snakemake --cores 1 -R {bad} -- results/figures" in msg


def test_db_commands_refuse_a_directory_without_a_database(tmp_path):
    (tmp_path / "notes.txt").write_text("not a database")
    code, out, err = _cli("db", "merge", tmp_path, "--out", tmp_path / "merged")
    assert code == 1 and _one_line(err) == (f"opcost: database {tmp_path}: holds no opcost table (configs.parquet, "
                                            "layers.parquet, measurements.parquet, e2e.parquet, overheads.parquet): "
                                            "a run's database is results/db")
    assert not (tmp_path / "merged").exists()
    code, _, err = _cli("db", "show", "--db", tmp_path)
    assert code == 1 and "holds no opcost table" in _one_line(err)


def test_predict_refuses_a_device_the_database_does_not_hold(tiny_run):
    code, out, err = _cli("predict", "mlp", "--batch", 2, "--db", tiny_run / "results" / "db", "--device", "cuda")
    assert code == 1 and out == ""
    assert _one_line(err) == ("opcost: --device cuda: the database holds no isolated measurement with device cuda "
                              "(device: cpu)")
    code, out, err = _cli("predict", "mlp", "--batch", 2, "--db", tiny_run / "results" / "db", "--threads", 4)
    assert code == 1 and _one_line(err) == ("opcost: --threads 4: the database holds no isolated measurement with "
                                            "threads 4 (threads: 1)")
    code, out, err = _cli("predict", "mlp", "--batch", 2, "--db", tiny_run / "results" / "db", "--threads", 1)
    assert code == 0 and out.startswith("mlp inference b2 (host ") and "device cpu, threads 1;" in out


@pytest.mark.parametrize("batch", ["0", "-3", "two"])
def test_a_batch_size_below_one_is_refused(tmp_path, batch):
    code, _, err = _cli("extract", "tiny_dlrm", "--batch", batch, "--out", tmp_path / "l.parquet")
    assert code == 2 and f"argument --batch: {batch!r} is not an integer of at least 1" in err
    assert "Traceback" not in err
    assert not (tmp_path / "l.parquet").exists()


def test_an_unwritable_output_names_the_path(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")  # a file where the output's directory should be
    code, _, err = _cli("extract", "tiny_dlrm", "--out", blocker / "layers.parquet")
    assert code == 1 and _one_line(err).startswith(f"opcost: {blocker}")


@pytest.mark.parametrize("code, remedy", [(errno.ENOSPC, "free some space and rerun: completed measurements are kept"),
                                          (errno.EACCES, "make it writable"), (errno.EROFS, "write elsewhere")])
def test_os_errors_name_the_path_and_the_remedy(code, remedy):
    msg = str(from_os_error(OSError(code, os.strerror(code), "results/journal/p.jsonl")))
    assert msg.startswith(f"results/journal/p.jsonl: {os.strerror(code)}: ") and remedy in msg


def test_outputs_follow_the_umask_so_a_shared_database_is_readable(tmp_path):
    io.write_json({"a": 1}, tmp_path / "x.json")
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == 0o666 & ~mask


def test_check_config_names_the_first_model_that_fails(tmp_path):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"batch_sizes": [2], "models": {
        "mlp": MLP, "gone": {"model": "nowhere:make"}}}))
    code, out, err = _cli("check-config", tmp_path / "c.yaml")
    assert code == 1 and _one_line(err).startswith("opcost: model gone: cannot import 'nowhere:make'")


def _scheduled(work, cfg: dict) -> dict:
    """{rule: jobs} that a dry run of ``cfg`` in ``work`` schedules, and the workloads of per-workload jobs."""
    (work / "changed.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))  # tier order: the fast tier first
    out = snakemake("--configfile", "changed.yaml", "-n", cwd=work).stdout
    jobs = {}
    for line in out.split("Job stats:")[-1].splitlines()[3:]:
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] != "total":
            jobs[parts[0]] = int(parts[1])
    models = {line.split("model=")[1].split(",")[0] for line in out.splitlines() if "wildcards: model=" in line}
    return {"jobs": jobs, "models": models}


def test_a_changed_config_reruns_exactly_the_jobs_it_affects(tiny_run):
    measuring = {"e2e", "insitu", "trace", "coplace", "profile"}

    cfg = yaml.safe_load(TINY.read_text())
    cfg["threads"] = 2
    got = _scheduled(tiny_run, cfg)
    assert measuring <= set(got["jobs"]) and "extract" not in got["jobs"] and "placement_tiers" not in got["jobs"]

    cfg = yaml.safe_load(TINY.read_text())
    cfg["dtype"] = "float64"
    got = _scheduled(tiny_run, cfg)
    assert "extract" in got["jobs"] and "placement_tiers" not in got["jobs"] and measuring <= set(got["jobs"])

    cfg = yaml.safe_load(TINY.read_text())
    cfg["profile"]["timing"]["max_seconds"] = 0.07
    got = _scheduled(tiny_run, cfg)
    assert "profile" in got["jobs"] and not {"extract", "e2e", "insitu", "trace", "coplace"} & set(got["jobs"])

    cfg = yaml.safe_load(TINY.read_text())
    cfg["models"]["mlp"]["kwargs"]["width"] = 32
    got = _scheduled(tiny_run, cfg)
    assert got["jobs"]["extract"] == 1 and got["models"] == {"mlp"}  # tiny_dlrm's and broken's jobs untouched
    # an unchanged config reruns nothing: test_workflow.test_completed_run_has_nothing_left_to_do


def test_a_deleted_result_is_named_with_the_command_that_rebuilds_it(tiny_run):
    table = tiny_run / "results" / "db" / "measurements.parquet"
    kept = tiny_run / "measurements.kept"
    shutil.copy2(table, kept)
    try:
        table.unlink()
        proc = snakemake("--configfile", str(TINY), "-n", cwd=tiny_run)
        assert ("opcost: 1 result file(s) of the last run are missing (results/db/measurements.parquet): the "
                "figures are stale; rebuild them with: snakemake --cores 1 -R results/db/measurements.parquet -- "
                "results/figures") in proc.stderr
        proc = snakemake("--configfile", str(TINY), "-n", "-R", "results/db/measurements.parquet", "--",
                         "results/figures", cwd=tiny_run)
        assert all(f"\n{rule} " in proc.stdout for rule in ("database", "validate", "figures"))
    finally:
        shutil.copy2(kept, table)


def test_a_strict_placement_tier_the_host_lacks_stops_the_run_before_any_measurement(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    cfg["models"] = {"mlp": cfg["models"]["mlp"]}
    cfg["placement"] = {"tiers": {"dram": {"numa": 0}, "absent": {"numa": 63}}, "on_missing": "strict"}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    measuring = [f"results/{stage}/mlp/inference_b2.parquet" for stage in ("e2e", "insitu")]
    proc = snakemake("--configfile", "c.yaml", "--cores", "1", *measuring, cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "absent" in proc.stderr and "NUMA node 63" in proc.stderr
    for stage in ("e2e", "insitu"):
        assert not (tmp_path / "results" / stage).exists(), stage
