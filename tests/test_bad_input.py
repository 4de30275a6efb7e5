"""Bad input and faults: each is one line naming the culprit (and the remedy), and completed work is kept.

Cases that need a completed run use the shared tiny run; the rest run the library or the CLI directly."""
import copy
import errno
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from opcost import host_check, io, preflight, rerun, stages, tables
from opcost.config import stage_settings, validate
from opcost.errors import OpcostError, Problems, from_os_error
from opcost.measure import numa
from opcost.measure.job import prepare_process
from opcost.model.sources import load_model
from opcost.model.workload import make_workload
from tests.helpers import TINY, snakemake

MLP = {"model": "tests.tiny_models:make_mlp", "input_shapes": [[8]]}
GPT2 = {"model": "hf:gpt2", "modes": ["decode"], "kwargs": {"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 64,
                                                            "bos_token_id": 0, "eos_token_id": 0}}
LLAMA = {"model": "hf:llama", "modes": ["decode"], "kwargs": {"num_hidden_layers": 2, "hidden_size": 64,
                                                              "num_attention_heads": 4, "intermediate_size": 128,
                                                              "vocab_size": 64}}


def _cli(*args, cwd=None):
    """The opcost command in a process of its own (in ``cwd``): (exit code, stdout, stderr)."""
    p = subprocess.run([sys.executable, "-m", "opcost.cli", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]),
                                                                          os.environ.get("PYTHONPATH", "")])})
    return p.returncode, p.stdout, p.stderr


def _one_line(stderr: str) -> str:
    """The error: one line starting with `opcost:` (log lines of the work done before may precede it, and warnings
    about the config, `opcost: warning:`)."""
    errors = [ln for ln in stderr.splitlines() if ln.startswith("opcost:") and not ln.startswith("opcost: warning:")]
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
        prepare_process(cfg)
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


@pytest.mark.parametrize("command", ["check-config", "check-models"])
def test_a_config_that_is_not_utf8_is_named_in_one_line(tmp_path, command):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("models:\n  resnet18: {}\n# café\n".encode("latin-1"))
    code, _, err = _cli(command, path)
    assert code == 1 and _one_line(err) == (f"opcost: config {path}: not UTF-8 text (byte 0xe9 at offset 28): save "
                                            "it as UTF-8")


def test_a_key_written_twice_in_a_config_is_named_in_one_line(tmp_path):
    (tmp_path / "c.yaml").write_text('models:\n  mlp: {model: "tests.tiny_models:make_mlp", input_shapes: [[8]]}\n'
                                     "threads: 1\nthreads: 2\n")
    expected = (f"opcost: config {tmp_path / 'c.yaml'}: line 4: key threads also on line 3: the last one would "
                "silently replace the first; keep one")
    code, _, err = _cli("check-config", tmp_path / "c.yaml")
    assert code == 1 and _one_line(err) == expected
    proc = snakemake("--configfile", str(tmp_path / "c.yaml"), "-n", cwd=tmp_path, check=False)
    assert proc.returncode != 0 and expected in proc.stdout + proc.stderr and not (tmp_path / "results").exists()


def test_advise_names_a_tier_given_twice(tiny_run):
    code, out, err = _cli("advise", "mlp", "--batch", 2, "--budget", "25%", "--tiers", "dram_b,dram_b", "--db",
                          tiny_run / "results" / "db")
    assert code == 1 and _one_line(err) == ("opcost: --tiers dram_b,dram_b: names one tier twice: give the fast tier, "
                                            "then a slower one (dram,dram_b)")
    # a model the database holds but its name alone cannot build (a module:callable of the run's config)
    code, out, err = _cli("advise", "mlp", "--batch", 2, "--budget", "25%", "--db", tiny_run / "results" / "db")
    assert code == 1 and _one_line(err) == ("opcost: model mlp: advise builds the model to see its tensors, and the "
                                            "database does not say how: give --config with the config file of the run "
                                            "that profiled it")


def test_db_show_names_a_shape_that_is_no_list_of_sizes(tiny_run):
    for shape in ("8,abc", "8,x"):  # "8,x" once read as the shape 8
        code, _, err = _cli("db", "show", "--shape", shape, "--db", tiny_run / "results" / "db")
        assert code == 1 and _one_line(err) == (f"opcost: --shape {shape}: expected an input's sizes as whole numbers, "
                                                "e.g. 8,64,56,56")
    code, _, err = _cli("db", "show", "--param", "kernel_size=[3,", "--db", tiny_run / "results" / "db")
    assert code == 1 and _one_line(err) == ("opcost: --param kernel_size=[3,: the value is no well-formed list or "
                                            "mapping (as in kernel_size=[3,3])")


def test_db_show_that_finds_nothing_says_which_filter_and_the_nearest_names(tiny_run):
    """A misspelt op type or host matched nothing: the line names the filter and what the database holds nearest; a
    combination that matches nothing says which filters it combined."""
    db = tiny_run / "results" / "db"
    code, out, _ = _cli("db", "show", "--op", "Linaer", "--db", db)
    assert code == 0 and out.startswith("no measurement has op 'Linaer' (closest: Linear")
    code, out, _ = _cli("db", "show", "--op", "Linear", "--host", "nohost", "--db", db)
    assert code == 0 and out.startswith("no measurement has host 'nohost'; the database holds: ")
    code, out, _ = _cli("db", "show", "--op", "Linear", "--shape", "1,2,3", "--db", db)
    assert code == 0 and out.strip() == "no measurement matches op Linear, shape 1,2,3 together"


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


def test_predict_refuses_another_variant_of_a_model_the_database_holds(tiny_run, tmp_path):
    db = tiny_run / "results" / "db"
    # tiny_dlrm was profiled with its config's small kwargs; the name alone builds the default size
    code, out, err = _cli("predict", "tiny_dlrm", "--batch", 3, "--db", db, "--no-trace")
    assert code == 1 and out == ""
    assert _one_line(err) == ("opcost: model tiny_dlrm: the database holds another variant of it than the one built "
                              "now (profiled at batch 2, inference; EmbeddingBag with embedding_dim 8, num_embeddings "
                              "100 there, embedding_dim 32, num_embeddings 10000 now): give --config with the config "
                              "file of the run that profiled it, so that it is built as profiled, or another name for "
                              "another variant")
    code, out, err = _cli("predict", "tiny_dlrm", "--batch", 3, "--db", db, "--no-trace", "--config", TINY)
    assert code == 0 and out.startswith("tiny_dlrm inference b3 ("), err  # built as profiled: answered
    # a workload the database holds, asked about with a config that builds it otherwise (size, dtype): refused
    cfg = yaml.safe_load(TINY.read_text())
    for change, said in ((lambda c: c["models"]["mlp"].setdefault("kwargs", {}).update(width=512), "Linear with"),
                         (lambda c: c.update(dtype="float64"), "dtype float32 there, float64 now")):
        mine = copy.deepcopy(cfg)
        change(mine)
        (tmp_path / "mine.yaml").write_text(yaml.safe_dump(mine))
        code, out, err = _cli("predict", "mlp", "--batch", 2, "--db", db, "--no-trace", "--config",
                              tmp_path / "mine.yaml")
        assert code == 1 and out == "" and said in _one_line(err), err
    # without a config, the database's variant, said
    code, out, err = _cli("predict", "tiny_dlrm", "--batch", 2, "--db", db, "--no-trace")
    assert code == 0 and "tiny_dlrm: the variant the database holds (as its run's config built it)" in out, out


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


def test_a_write_that_fails_names_the_result_it_could_not_write(tmp_path):
    """A full disk, like a file size limit, fails a write, not an open: the OS error names no file. The result's
    path is named, not "a file", for Parquet (pyarrow's error) and text alike, and no partial file is left; a real
    write failure, from a file size limit (``ulimit -f``) in a process of its own."""
    code = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from opcost import io, tables\n"
        "from opcost.errors import from_os_error\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
        "out = Path(sys.argv[1])\n"
        "big = [{**dict.fromkeys(tables.E2E.names), 'model': f'model {i} ' * 8} for i in range(3000)]\n"
        "for write in (lambda: io.write_text('x' * 100_000, out / 'summary.txt'),\n"
        "              lambda: io.write_parquet(big, out / 'db' / 'e2e.parquet', tables.E2E)):\n"
        "    try:\n"
        "        write()\n"
        "    except OSError as e:\n"
        "        print(from_os_error(e))\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 2, done.stderr
    for line, name in zip(lines, (tmp_path / "summary.txt", tmp_path / "db" / "e2e.parquet")):
        assert line.startswith(f"{name}: ") and "ulimit -f" in line, line
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []


def test_outputs_follow_the_umask_so_a_shared_database_is_readable(tmp_path):
    io.write_json({"a": 1}, tmp_path / "x.json")
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == 0o666 & ~mask


def test_check_config_names_every_model_that_fails(tmp_path):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"batch_sizes": [2], "models": {
        "mlp": MLP, "gone": {"model": "nowhere:make"}, "broken": {"model": "tests.tiny_models:explode"}}}))
    code, out, err = _cli("check-config", tmp_path / "c.yaml")
    lines = [ln for ln in err.splitlines() if ln.startswith("opcost:")]
    assert code == 1 and "Traceback" not in err and len(lines) == 2, err
    assert lines[0].startswith("opcost: model gone: cannot import 'nowhere:make'")  # found before building
    assert lines[1] == ("opcost: model broken: tests.tiny_models:explode raised RuntimeError: this factory always "
                        "fails")  # found by building it


def test_check_config_runs_each_batch_size(tmp_path):
    one = {"model": "tests.tiny_models:make_one_sample_only", "input_shapes": [[8]]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"batch_sizes": [1, 4], "models": {"one": one, "mlp": MLP}}))
    code, out, err = _cli("check-config", tmp_path / "c.yaml")
    line = _one_line(err)
    assert code == 1 and line.startswith("opcost: model one") and line.endswith("(at batch 4)"), err
    assert "this model takes one sample at a time" in line
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"batch_sizes": [1], "models": {"one": one, "mlp": MLP}}))
    code, out, err = _cli("check-config", tmp_path / "c.yaml")
    assert code == 0 and out.strip().endswith("every model builds and runs at each batch size"), err


# One model entry each: what the check before the first job says of it (opcost.preflight), or None: nothing.
PREFLIGHT = [
    ({"model": "hf:NoSuchModel"}, "model m: hf:NoSuchModel: 'NoSuchModel' is neither a transformers model class"),
    ({"model": "hf:bert", "kwargs": {"no_such_setting": 3}}, "model m: hf:bert: BertConfig has no setting "
                                                            "'no_such_setting'"),
    ({"model": "hf:llama"}, "model m: hf:llama has 6.61 billion parameters"),  # the full-size default, 26 GB
    ({"model": "timm:resnet9999"}, "model m: timm:resnet9999: timm has no model 'resnet9999'"),
    ({"model": "nowhere:make"}, "model m: cannot import 'nowhere:make'"),
    ({"model": "tests.tiny_models:no_such_factory"}, "model m: cannot import 'tests.tiny_models:no_such_factory'"),
    ({"model": "resnet1800"}, "model m: unknown model 'resnet1800'"),
    ({"model": "resnet18", "kwargs": {"num_classs": 10}}, "model m: resnet18: ResNet.__init__() got an unexpected "
                                                          "keyword argument 'num_classs': check its kwargs"),
    ({"model": "tiny_dlrm", "kwargs": {"tabels": 2}}, "model m: tiny_dlrm: "),
    ({"model": "resnet18", "kwargs": {"num_classes": 10}}, None),
    ({**MLP, "batch_sizes": [10 ** 12]}, "model m: batch 1000000000000 needs 3.2e+04 GB for its inputs alone"),
    ({**MLP, "input_dtype": "int64", "input_range": [5, 2]}, "config: models.m.input_range: [5, 2] draws integers "
                                                            "from [low, high): low must be below high"),
    ({"model": "resnet18", "batch_sizes": [100000]}, "model m: batch 100000 needs at least 321 GB for one "
                                                     "activation (3.21 MB a sample), more than the "),
    ({**GPT2, "context_lens": [1024]}, "model m: context 1024: the model has 1024 learned positions, and a step at "
                                       "context 1024 takes position 1025: use a shorter context (context_lens"),
    ({**LLAMA, "context_lens": [1000000]}, "model m: context 1000000 at batch 2: its prefill alone is 5.1e+14 FLOPs, "
                                           "over 9 minutes even at 1e+12 FLOP/s: use a shorter context"),
    ({**LLAMA, "context_lens": [4096]}, None),  # rotary positions: no fixed limit
    ({**GPT2, "modes": ["inference"], "seq_len": 2048}, "model m: seq_len 2048: hf:gpt2 has 1024 learned positions, "
                                                        "so a sequence takes at most 1024 tokens: use seq_len 1024"),
    ({**GPT2, "modes": ["inference"], "seq_len": 1024}, None),
    ({"model": "hf:gpt2", "kwargs": {"n_layer": "two"}}, "model m: hf:gpt2: GPT2Config: TypeError: Field 'n_layer' "
                                                        "expected int, got str (value: 'two'): check its kwargs"),
    ({"model": "hf:gpt2", "kwargs": {"n_layer": -1}}, "model m: hf:gpt2: GPT2Config setting 'n_layer' is -1: it "
                                                     "counts or sizes something (default 12), so it must be 0 or more"),
    ({**GPT2, "modes": ["inference"], "input_range": [0, 10]}, "config: models.m.input_range: applies to inputs drawn "
                                                               "at input_shapes, and hf:gpt2 has no input_shapes"),
    ({**MLP, "memory_format": "channels_last"}, "config: models.m.memory_format: channels_last orders images"),
    ({**MLP, "input_shapes": []}, "config: models.m.input_shapes: [] lists no input"),
    ({"model": "tests.tiny_models:explode"}, None),  # a factory that raises: only running it shows it
    ({"model": "resnet18"}, None),
    ({"model": "hf:bert", "kwargs": {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
                                     "intermediate_size": 64}}, None),
]


@pytest.mark.parametrize("entry, problem", PREFLIGHT, ids=[str(e.get("model")) for e, _ in PREFLIGHT])
def test_a_model_that_cannot_be_built_is_named_before_the_first_job(entry, problem):
    found = preflight.problems(validate({"models": {"m": entry}, "batch_sizes": [2]}))
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith(problem) and "\n" not in found[0], found


def test_a_generate_question_a_model_cannot_answer_is_named_before_the_first_job():
    """config `generate`: a decoder without a language-model head (a model type's AutoModel), and a prompt whose
    last step passes the model's learned positions."""
    lm = {**GPT2, "model": "hf:GPT2LMHeadModel"}
    found = preflight.problems(validate({"models": {"m": LLAMA}, "batch_sizes": [2],
                                         "generate": {"prompts": [16], "new_tokens": [8]}}))
    assert found == ["model m: config generate: hf:llama builds LlamaModel, which has no language-model head to "
                     "generate() with: name its causal-LM class (e.g. hf:LlamaForCausalLM, hf:GPT2LMHeadModel)"]
    assert preflight.problems(validate({"models": {"m": lm}, "batch_sizes": [2], "generate": {
        "prompts": [1020], "new_tokens": [8]}})) == [
        "model m: context 1027: the model has 1024 learned positions, and a step at context 1027 takes position "
        "1028: use a shorter prompt or fewer new tokens (generate.prompts, generate.new_tokens), or more positions in "
        "its kwargs"]
    assert preflight.problems(validate({"models": {"m": lm}, "batch_sizes": [2], "generate": {
        "prompts": [16], "new_tokens": [8]}})) == []


def test_an_operator_type_misspelt_in_the_loop_is_named_before_the_first_job():
    found = preflight.problems(validate({"models": {"mlp": MLP}, "loop": {"initial_op_types": [
        "Lineer", "Linear", "addmm", "MyOwnBlock", "all"]}}))
    assert found == ["config: loop.initial_op_types: 'Lineer' is no operator type: did you mean 'Linear'?"]


def test_config_mistakes_are_named_each_in_one_line():
    long_name = "m" * 300
    found = preflight.problems(validate({"models": {long_name: MLP}}))
    assert found == [f"config: models.{'m' * 40}...: a model name of 300 bytes names directories of results/, "
                     f"longer than this file system's {preflight.name_max()}-byte limit: shorten it"]
    with pytest.raises(OpcostError, match=r"^config: predict_only.mlp: also under `models`: a model is either "
                                          r"profiled or predicted only"):
        validate({"models": {"mlp": MLP}, "predict_only": {"mlp": dict(MLP)}})
    aliased = yaml.safe_load("models: {mlp: &m {input_shapes: [[8]]}}\npredict_only: {mlp: *m}")
    with pytest.raises(OpcostError, match=r"^config: predict_only.mlp: also under `models`"):
        validate(aliased)  # a YAML alias makes both entries one object: still the user's mistake
    cfg = validate({"models": {"mlp": MLP}, "predict_only": {"wide": dict(MLP)}})
    assert validate(cfg) == cfg  # a validated config validates again unchanged
    with pytest.raises(OpcostError, match=r"^config: sweeps\[0\].grid: \{\} should be non-empty"):
        validate({"models": {"mlp": MLP}, "sweeps": [{"op": "Linear", "grid": {}}]})
    with pytest.raises(Problems) as e:  # every bad key at once, one line each
        validate({"models": {"mlp": {**MLP, "batch_sizes": [0]}}, "threads": "two", "colour": "red"})
    assert str(e.value).splitlines() == ["config: colour: unknown key",
                                         "config: threads: 'two' is not of type 'integer'",
                                         "config: models.mlp.batch_sizes[0]: 0 is less than the minimum of 1"]


def test_a_value_of_either_kind_says_what_is_wrong_and_what_is_expected():
    with pytest.raises(Problems) as e:
        validate({"models": {"mlp": MLP}, "advise": {"budgets": [1.5, "abc", 0.5, "2GiB"]}})
    expected = ("(expected: fast-tier budgets: a share of the placeable footprint (0 to 1, or 0% to 100%) or a size "
                "('2GiB', '512MB'))")
    assert str(e.value).splitlines() == [f"config: advise.budgets[0]: 1.5 is greater than the maximum of 1 {expected}",
                                         f"config: advise.budgets[1]: 'abc' is not of the expected form {expected}"]


def test_placement_tiers_that_will_not_do_as_written_are_said(tmp_path):
    cfg = validate({"models": {"mlp": MLP}, "placement": {"tiers": {"dram": {"numa": 0}, "dram_b": {"numa": 0},
                                                                      "gpu": {"cuda": "host"}}}})
    assert host_check.tier_warnings(cfg) == [
        "placement.tiers.gpu: a GPU tier ({cuda: host}) places a CUDA device's tensors, but device is cpu: it is "
        "skipped (remove it, or set device: cuda)",
        "placement.tiers: dram, dram_b are all NUMA node 0: one placement, measured 2 times"]
    # the fast tier on a node this host lacks: with on_missing: skip the slow tier would be the baseline unsaid
    cfg = validate({"models": {"mlp": MLP}, "placement": {"tiers": {"far": {"numa": 63}, "dram": {"numa": 0}}}})
    assert preflight.problems(cfg) == [
        "config: placement.tiers.far: the fast tier (the first, which every slowdown is relative to) is NUMA node 63, "
        f"which this host lacks (nodes: {', '.join(map(str, numa.nodes()))}): put a tier it has first"]
    # on_missing: strict promises an error before measuring: a tier this host lacks is one, before the first job
    strict = {"tiers": {"dram": {"numa": 0}, "far": {"numa": 63}}, "on_missing": "strict"}
    assert preflight.problems(validate({"models": {"mlp": MLP}, "placement": strict})) == [
        "config: placement.tiers.far: NUMA node 63 not present on this host (nodes: "
        f"{', '.join(map(str, numa.nodes()))}) (on_missing: strict; set skip to measure the other tiers)"]
    assert preflight.problems(validate({"models": {"mlp": MLP}, "placement": {**strict, "on_missing": "skip"}})) == []
    # an absent fast tier under strict: one line for it, not the fast tier's and the strict check's both
    first = {"tiers": {"far": {"numa": 63}, "dram": {"numa": 0}}, "on_missing": "strict"}
    found = preflight.problems(validate({"models": {"mlp": MLP}, "placement": first}))
    assert len(found) == 1 and found[0].startswith("config: placement.tiers.far: NUMA node 63 not present"), found


def test_a_sweep_point_larger_than_the_memory_free_is_refused_before_the_first_job(tmp_path):
    """A sweep point of 640 GB of weights used to fail in its own job, after the others ran; its chain is now built
    on the meta device before the first job (nothing allocated) and named; a point that fits passes, remembered."""
    cfg = validate({"models": {"mlp": MLP}, "batch_sizes": [1],
                    "sweeps": [{"op": "Linear", "points": [{"features": 200000, "rows": 4}, {"features": 64}]}]})
    found = preflight.problems(cfg, cache_dir=tmp_path)
    assert len(found) == 1 and found[0].startswith("config: sweeps: point sweep-Linear-f200000-r4 needs at least "
                                                   "640 GB (weights and inputs), more than the "), found
    fits = validate({"models": {"mlp": MLP}, "batch_sizes": [1], "sweeps": [{"op": "Linear", "points": [{"rows": 4}]}]})
    assert preflight.problems(fits, cache_dir=tmp_path) == [] and host_check.sweep_problems(fits) == []
    assert not preflight._needs_import(fits, tmp_path)  # passed once: the next parse imports nothing for it


@pytest.mark.parametrize("entry, line", [
    ({**MLP, "memory_format": "token_major"}, "config: models.mlp.memory_format: token_major orders images [channels, "
                                              "height, width]; its input_shapes [[8]] hold no image"),
    ({**MLP, "seq_len": 64}, "config: models.mlp.seq_len: sets the token ids of a transformers (hf:) model")])
def test_an_entry_key_its_model_ignores_is_named_before_the_first_job(entry, line, tmp_path):
    """token_major on flat inputs and seq_len on a model that is no transformers one were accepted and ignored."""
    found = preflight.problems(validate({"models": {"mlp": entry}}), cache_dir=tmp_path)
    assert len(found) == 1 and found[0].startswith(line), found


def test_numbers_yaml_reads_as_strings_are_numbers():
    raw = yaml.safe_load("models: {mlp: {input_shapes: [[8]]}}\nprofile: {timing: {abs_ci_s: 2e-7, max_seconds: 1e-1}}")
    assert raw["profile"]["timing"]["abs_ci_s"] == "2e-7"  # YAML 1.1 wants a dot: PyYAML reads a string
    timing = validate(raw)["profile"]["timing"]
    assert timing["abs_ci_s"] == 2e-7 and timing["max_seconds"] == 0.1
    with pytest.raises(OpcostError, match=r"^config: profile.timing.max_seconds: 'fast' is not of type 'number'$"):
        validate({"models": {"mlp": MLP}, "profile": {"timing": {"max_seconds": "fast"}}})


def test_a_whole_number_written_as_a_float_is_the_integer_it_means():
    raw = yaml.safe_load("models: {mlp: {input_shapes: [[8.0]]}}\nthreads: 1.0\nprofile: {chunks: 2.0}")
    cfg = validate(raw)
    assert (cfg["threads"], cfg["profile"]["chunks"], cfg["models"]["mlp"]["input_shapes"]) == (1, 2, [[8]])
    assert all(type(v) is int for v in (cfg["threads"], cfg["profile"]["chunks"],
                                        cfg["models"]["mlp"]["input_shapes"][0][0]))
    # the same params as `threads: 1`: nothing reruns for a rewritten number
    assert stage_settings(cfg, "e2e", "mlp") == stage_settings(validate(yaml.safe_load(
        "models: {mlp: {input_shapes: [[8]]}}\nthreads: 1\nprofile: {chunks: 2}")), "e2e", "mlp")
    with pytest.raises(OpcostError, match=r"^config: profile.chunks: 2.5 is not of type 'integer'$"):
        validate({"models": {"mlp": MLP}, "profile": {"chunks": 2.5}})


# config mistakes this round's probe found, each refused by validate in one line: (config, the line's start)
REFUSED = [
    ({"models": {"mlp": MLP}, "sweeps": [{"op": "attention", "grid": {"heads": [4], "heads_kv": [3]}}]},
     "config: sweeps: attention grid {\"heads\": [4], \"heads_kv\": [3]}: no combination can be built (heads_kv 3 "
     "must divide heads 4)"),
    ({"models": {"mlp": MLP}, "device": "banana"}, "config: device: 'banana' is not of the expected form (expected: "
                                                   "cpu, cuda or cuda:N)"),
    (yaml.safe_load("models: {2024: {input_shapes: [[8]]}}"), "config: models.2024: YAML reads this name as a number: "
                                                               "quote it"),
    ({"models": {"mlp": MLP}, "placement": {"tiers": {"dram": {"numa": 0}, "far.1": {"numa": 1}}}},
     "config: placement.tiers: 'far.1' is not of the expected form (expected: a tier name names files"),
    ({"models": {"mlp": MLP}, "modes": ["inferance"]}, "config: modes[0]: 'inferance' is not of the expected form "
                                                       "(expected: inference, training, decode"),
    ({"models": {"mlp": MLP}, "generate": {"prompts": [16]}}, "config: generate.new_tokens: missing beside "
                                                              "generate.prompts"),
    ({"models": {"mlp": MLP}, "generate": {"prompts": [16], "new_tokens": [4]}}, "config: generate: no model has a "
                                                                                 "decode or prefill mode"),
    ({"models": {"mlp": MLP}, "e2e": {"timing": {"min_samples": 50, "max_samples": 10}}},
     "config: e2e.timing.min_samples: 50 is more than max_samples 10"),
    ({"models": {"mlp": MLP}, "sweeps": [{"op": "Linear", "points": []}]}, "config: sweeps[0].points: [] should be "
                                                                           "non-empty"),
    ({"models": {"mlp": MLP}, "sweeps": [{"op": "Conv2d", "points": [{"channels": 30, "groups": 4}]}]},
     'config: sweeps: Conv2d point {"channels": 30, "groups": 4}: groups 4 must divide channels 30'),
    ({"models": {"mlp": MLP}, "sweeps": [{"op": "attention", "points": [{"heads": 6, "heads_kv": 4}]}]},
     'config: sweeps: attention point {"heads": 6, "heads_kv": 4}: heads_kv 4 must divide heads 6'),
    ({"models": {"mlp": MLP}, "advise": {"budgets": ["..%", 0.5]}}, "config: advise.budgets[0]: '..%' is not of the "
     "expected form"),
    ({"models": {"mlp": MLP}, "advise": {"budgets": ["150%"]}}, "config: advise.budgets[0]: '150%' is not of the "
     "expected form"),
    ({"models": {"mlp": MLP}, "sweeps": [{"op": "Conv2d", "points": [{"channels_last": 3}]}]},
     "config: sweeps[0].points[0].channels_last: 3 is not one of [0, 1, 2]"),
    ({"models": {"mlp": MLP}, "sweeps": [{"op": "Linear", "grid": {"features": [8, 16]}, "points": [{"rows": 4}]}]},
     "config: sweeps: Linear: gives both points and grid: points are measured in place of a grid"),
    ({"models": {"sweep-Linear-f16-r4": MLP}, "sweeps": [{"op": "Linear", "grid": {"features": [16], "rows": [4]}}]},
     "config: models.sweep-Linear-f16-r4: names starting 'sweep-' are the sweep points': rename it"),
    ({"models": {"mlp": MLP}, "threads": 10 ** 11},
     "config: threads: 100000000000 is greater than the maximum of 4096"),
]


@pytest.mark.parametrize("config, line", REFUSED, ids=[r[1][:40] for r in REFUSED])
def test_config_mistakes_found_by_the_probe_are_refused_in_one_line(config, line):
    with pytest.raises(OpcostError) as e:
        validate(config)
    assert str(e.value).startswith(line) and "\n" not in str(e.value), str(e.value)


def test_a_model_entrys_key_order_and_a_predict_only_entry_change_no_measuring_jobs_params():
    a = validate({"models": {"mlp": {"model": "tests.tiny_models:make_mlp", "input_shapes": [[8]]}},
                  "predict_only": {"wide": {"model": "tests.tiny_models:make_mlp", "kwargs": {"width": 32}}}})
    b = validate({"models": {"mlp": {"input_shapes": [[8]], "model": "tests.tiny_models:make_mlp"}},
                  "predict_only": {"wide": {"model": "tests.tiny_models:make_mlp", "kwargs": {"width": 64}}}})
    for stage in ("profile", "figures", "advise", "generate"):
        assert stage_settings(a, stage) == stage_settings(b, stage), stage
    assert stage_settings(a, "e2e", "mlp") == stage_settings(b, "e2e", "mlp")
    assert stage_settings(a, "unseen") != stage_settings(b, "unseen")  # the stage that predicts it reruns
    assert stage_settings(a, "e2e", "wide") != stage_settings(b, "e2e", "wide")  # and its own timing


def test_a_meter_asked_for_by_name_that_the_host_lacks_is_named_before_the_first_job(tmp_path):
    from opcost.measure.energy import RaplMeter

    if RaplMeter().available:
        pytest.skip("this host reads RAPL")
    found = preflight.problems(validate({"models": {"mlp": MLP}, "energy": {"meter": "rapl"}}))
    assert len(found) == 1 and found[0].startswith("config: energy.meter: rapl: ") and found[0].endswith(
        "(or energy.meter: auto, which goes on without a meter)"), found
    cfg = validate({"models": {"mlp": MLP}, "placement": {"tiers": {"dram": {"numa": 0}}, "simultaneous": True}})
    assert host_check.tier_warnings(cfg) == [
        "placement.simultaneous: co-placement moves tensors between two tiers, but placement.tiers names 1: its jobs "
        "measure nothing (add a slower tier, or set simultaneous: false)"]


@pytest.mark.parametrize("argv, culprit", [
    (["extract", "tiny_dlrm", "--batch", "2", "--out", "l.csv"], "opcost: --out l.csv: the layers table is written"),
    (["check-config", ""], "opcost: config '': an empty path"),
    (["db", "show", "--param", "=3"], "opcost: --param =3: expected NAME=VALUE"),
    (["advise", "mlp", "--batch", "2", "--budget", "50%", "--out", "l.parquet"],
     "opcost: --out l.parquet: the plan file is YAML"),
    (["advise", "mlp", "--batch", "2", "--budget", "50%", "--db", "db", "--out", "db/plan.yaml"],
     "opcost: --out db/plan.yaml: lies inside the database db, which advise only reads"),
    (["check-models", str(TINY), "--models", "nosuch"], "opcost: --models nosuch: not a model of"),
    (["extract", "tiny_dlrm", "--batch", "2", "--out", "l.parquet", "--device", "banana"],
     "opcost: --device banana: 'banana' is not of the expected form (expected: cpu, cuda or cuda:N)"),
    (["extract", "torchvision.models:squeezenet1_1", "--batch", "1", "--out", "l.parquet", "--device", "banana"],
     "opcost: --device banana: 'banana' is not of the expected form"),  # a model given by its source alike
])
def test_cli_mistakes_found_by_the_probe_are_named_in_one_line(argv, culprit, tmp_path):
    code, out, err = _cli(*argv, cwd=tmp_path)
    assert code != 0 and err.strip().startswith(culprit) and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "l.csv").exists()


def test_predict_checks_a_workload_no_config_listed_before_building_it(tiny_run):
    db = tiny_run / "results" / "db"
    for argv, culprit in ((["--mode", "decode", "--context", "5000"], "opcost: model hf:gpt2: context 5000: the model "
                                                                       "has 1024 learned positions"),
                          (["--batch", "100000"], None)):
        model = "hf:gpt2" if culprit else "resnet18"
        code, out, err = _cli("predict", model, "--batch", 1, *argv, "--db", db, "--no-trace")
        assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, err
        assert err.startswith(culprit or "opcost: model resnet18: batch 100000 needs at least 321 GB for one "
                                         "activation"), err


def test_a_decode_step_from_a_database_of_no_decode_step_cites_no_accuracy_figure(tiny_run):
    code, out, err = _cli("predict", "hf:gpt2", "--batch", 1, "--mode", "decode", "--context", 64, "--db",
                          tiny_run / "results" / "db", "--no-trace")
    assert code == 0, err
    assert "what to expect: the database holds no decode step of any model" in out and "median |error|" not in out


def test_a_database_without_its_end_to_end_table_says_so_and_keeps_an_interval(tiny_run, tmp_path):
    db = tmp_path / "db"
    shutil.copytree(tiny_run / "results" / "db", db)
    (db / "e2e.parquet").unlink()
    code, out, err = _cli("predict", "tiny_dlrm", "--batch", 2, "--db", db, "--no-trace")
    assert code == 0 and f"opcost: database {db}: no e2e.parquet (the end-to-end times" in err, err
    low, high = (float(x) for x in re.search(r"\[([0-9.]+), ([0-9.]+)\]", out).groups())
    assert high > 1.2 * low and "interval: no end-to-end time in the database: the method's error taken as" in out
    # a table of no row (a merge of a database without it used to write one) is named as a missing one is
    io.write_parquet(pd.read_parquet(db / "overheads.parquet").iloc[0:0], db / "overheads.parquet", tables.OVERHEADS)
    code, out, err = _cli("predict", "tiny_dlrm", "--batch", 2, "--db", db, "--no-trace")
    assert code == 0 and f"opcost: database {db}: overheads.parquet holds no row (" in err, err


def test_extract_takes_a_model_given_by_its_source(tmp_path):
    code, out, err = _cli("extract", "torchvision.models:squeezenet1_1", "--batch", 1, "--out", tmp_path / "l.parquet")
    assert code == 0, err
    layers = pd.read_parquet(tmp_path / "l.parquet")
    assert set(layers["model"]) == {"torchvision.models_squeezenet1_1"} and "Conv2d" in set(layers["op_type"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a CUDA device")
def test_a_cuda_device_the_host_lacks_is_named_before_the_first_job():
    found = preflight.problems(validate({"models": {"mlp": MLP}, "device": "cuda"}))
    assert len(found) == 1 and found[0].startswith("config: device: 'cuda' requested but torch finds no CUDA device")


def test_every_problem_of_a_config_is_named_before_the_first_job(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    cfg["models"] = {"mlp": cfg["models"]["mlp"], "resnet1800": {}, "gone": {"model": "nowhere:make"},
                     "llm": {"model": "hf:NoSuchModel"}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    # found while Snakemake builds the DAG (opcost.preflight.start): a dry run ends with them and fails, a run
    # stops before its first job
    for dry in (["-n"], []):
        proc = snakemake("--configfile", "c.yaml", "--cores", "1", *dry, cwd=tmp_path, check=False)
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("opcost: model")]
        assert proc.returncode != 0 and [ln.split(":")[1] for ln in lines] == [" model resnet1800", " model gone",
                                                                              " model llm"], (dry, proc.stderr)
        assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()  # no job ran


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
    measuring = {"e2e", "alone", "insitu", "trace", "coplace", "profile"}

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
    assert {"profile", "alone"} <= set(got["jobs"]) and not {"extract", "e2e", "insitu", "trace", "coplace"} & \
        set(got["jobs"])

    cfg = yaml.safe_load(TINY.read_text())
    cfg["profile"]["chunks"] = 2  # how the profiling is split into jobs: no result depends on it, the alone jobs'
    got = _scheduled(tiny_run, cfg)  # neither (they time each workload whole)
    assert not {"alone", "extract", "e2e", "insitu", "trace", "coplace"} & set(got["jobs"]), got

    cfg = yaml.safe_load(TINY.read_text())
    cfg["loop"]["target"] = 0.5  # the loop's stopping rule: its evaluation, nothing measured
    got = _scheduled(tiny_run, cfg)
    assert "evaluate" in got["jobs"] and not measuring & set(got["jobs"]), got

    cfg = yaml.safe_load(TINY.read_text())
    cfg.setdefault("profile", {})["e2e_every"] = 2  # the trace's glue is timed against the rotation's rounds
    got = _scheduled(tiny_run, cfg)
    assert {"profile", "trace"} <= set(got["jobs"]) and not {"extract", "e2e", "insitu", "coplace"} & set(got["jobs"])

    cfg = yaml.safe_load(TINY.read_text())
    cfg.setdefault("placement", {})["max_per_config"] = 5  # the profiling's and co-placement's, not a tier's timing
    got = _scheduled(tiny_run, cfg)
    assert "profile" in got["jobs"] and not {"e2e_tier", "e2e", "extract", "placement_tiers"} & set(got["jobs"]), got

    cfg = yaml.safe_load(TINY.read_text())
    cfg.setdefault("e2e", {})["plain"] = not cfg["e2e"].get("plain", True)  # the e2e stage's own
    got = _scheduled(tiny_run, cfg)
    assert "e2e" in got["jobs"] and not {"e2e_tier", "profile", "extract"} & set(got["jobs"]), got

    cfg = yaml.safe_load(TINY.read_text())
    cfg["models"]["mlp"]["kwargs"]["width"] = 32
    got = _scheduled(tiny_run, cfg)
    # tiny_dlrm's and broken's jobs untouched; mlp_wide's end-to-end job too, since mlp is one of its controls
    # (opcost.measure.control): it is timed in turn with the changed model
    assert got["jobs"]["extract"] == 1 and got["jobs"]["e2e"] == 2 and got["models"] == {"mlp", "mlp_wide"}, got

    cfg = yaml.safe_load(TINY.read_text())
    cfg["predict_only"]["mlp_wide"]["kwargs"]["width"] = 32  # a model never profiled: its own extract and e2e
    got = _scheduled(tiny_run, cfg)
    assert got["models"] == {"mlp_wide"} and got["jobs"]["extract"] == got["jobs"]["e2e"] == 1, got
    assert not {"profile", "alone", "insitu", "trace"} & set(got["jobs"]), got

    # an unchanged config reruns nothing: test_workflow.test_completed_run_has_nothing_left_to_do


def test_a_changed_loop_target_measures_nothing_again(tiny_run, tmp_path):
    """The loop's stopping rule reruns its evaluations and what is made from them; the profiling jobs whose types
    the evaluations chose as before are not rerun (their params hold the choice, the evaluation file is `ancient`),
    and the never-profiled model's short trace is reused (Snakemake reruns the jobs after a checkpoint's rerun
    even when the database it rebuilt nothing of is as it was)."""
    tiny_run = Path(shutil.copytree(tiny_run, tmp_path / "run", symlinks=True))
    cfg = yaml.safe_load(TINY.read_text())
    cfg["loop"]["target"] = 0.5
    (tiny_run / "changed.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = snakemake("--configfile", "changed.yaml", "--cores", "1", cwd=tiny_run)
    ran = {line.split()[1].rstrip(":") for line in proc.stderr.splitlines()
           if line.startswith(("localrule ", "rule ", "checkpoint ", "localcheckpoint "))}
    assert "evaluate" in ran and not {"profile", "database", "e2e", "alone", "insitu", "trace", "coplace"} & ran, ran
    assert "short trace of an earlier run at the same settings reused" in (tiny_run / "logs/unseen.log").read_text()
    assert "Nothing to be done" in snakemake("--configfile", "changed.yaml", "--cores", "1", cwd=tiny_run).stderr


# result files damaged after a finished run, each as a user would: (path, what is done to it)
REPAIRS = [
    ("results/validation/predictions.tsv", "delete"),  # no job reads it: Snakemake alone never rebuilds it
    ("results/layers/mlp/inference_b2.parquet", "delete"),  # rebuilt, its profiling reused from the journal
    ("results/db/measurements.parquet", "truncate"),  # unreadable, its time kept
    ("results/figures/breakdown.png", "truncate"),  # a file of a folder output, cut short (the folder's time kept)
]


def test_a_deleted_or_damaged_result_is_rebuilt_by_rerunning_the_same_command(tiny_run, tmp_path):
    # on a copy of the shared run: the rebuild reruns the never-profiled model's own short trace, whose timing the
    # other tests' view of the run (its summary as printed) must not see change
    tiny_run = Path(shutil.copytree(tiny_run, tmp_path / "run", symlinks=True))
    measured = set(pd.read_parquet(tiny_run / "results/db/measurements.parquet")["config_id"])
    for path, how in REPAIRS:
        f = tiny_run / path
        if how == "delete":
            f.unlink()
        else:
            st = f.stat()
            f.write_bytes(f.read_bytes()[: st.st_size // 2])
            os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    proc = snakemake("--configfile", str(TINY), "-n", cwd=tiny_run)  # a dry run changes nothing and shows the jobs
    line = _one_line(proc.stderr)
    assert line.startswith("opcost: 4 result file(s) of an earlier run are missing or damaged (") and line.endswith(
        "): a run without -n rebuilds them and what is made from them"), line
    jobs = {ln.split()[0] for ln in proc.stdout.split("Job stats:")[-1].splitlines()[2:] if ln.strip()}
    assert {"extract", "catalog", "profile", "database", "validate", "figures"} <= jobs, proc.stdout
    assert not {"e2e", "insitu", "trace", "coplace"} & jobs  # nothing else measured again
    assert not (tiny_run / REPAIRS[0][0]).exists()

    proc = snakemake("--configfile", str(TINY), "--cores", "1", cwd=tiny_run)  # the same command as the run's
    assert "): rebuilding them and what is made from them" in proc.stderr
    for path, _ in REPAIRS:
        assert (tiny_run / path).exists(), path
    assert set(pd.read_parquet(tiny_run / "results/db/measurements.parquet")["config_id"]) == measured
    logs = [p.read_text() for p in (tiny_run / "logs" / "profile").glob("iter0_chunk*.log")]
    assert logs and all(re.search(r"configurations: 0 measured now", t) for t in logs), logs  # nothing re-measured
    assert "Nothing to be done" in snakemake("--configfile", str(TINY), "--cores", "1", cwd=tiny_run).stderr


def test_damage_is_found_in_every_kind_of_result_file(tiny_run, tmp_path):
    """What a plain rerun must rebuild: a table cut short or of another table, a database table whose footer reads
    but whose pages do not, a text table that is no text, an image or a trace cut short, an empty file."""
    import pyarrow.parquet as pq

    from opcost.repair import damage

    r = tiny_run / "results"
    (tmp_path / "db").mkdir()
    traces = sorted((r / "trace").rglob("*.json.gz"), key=lambda p: -p.stat().st_size)  # the largest first
    good = [r / "db/measurements.parquet", r / "validation/predictions.tsv", r / "figures/breakdown.png", traces[0]]
    assert [damage(f) for f in good] == [None] * 4
    cases = {}
    shutil.copy(r / "db/layers.parquet", tmp_path / "db/e2e.parquet")
    cases["db/e2e.parquet"] = "columns of another table"
    data = bytearray((r / "db/measurements.parquet").read_bytes())
    meta = pq.read_metadata(r / "db/measurements.parquet").row_group(0)
    at = next(meta.column(i).data_page_offset for i in range(meta.num_columns)
              if meta.column(i).path_in_schema == "median_s")
    data[at + 4:at + 20] = b"\x7f" * 16  # a data page, the footer intact
    (tmp_path / "db/measurements.parquet").write_bytes(bytes(data))
    cases["db/measurements.parquet"] = ""
    (tmp_path / "p.tsv").write_bytes(b"\xff\xfe\x00junk")
    cases["p.tsv"] = "codec can't decode"
    (tmp_path / "b.png").write_bytes((r / "figures/breakdown.png").read_bytes()[:400])
    cases["b.png"] = "a PNG image cut short"
    whole = traces[0].read_bytes()
    (tmp_path / "t.json.gz").write_bytes(whole[: len(whole) // 2])
    cases["t.json.gz"] = "ended before the end-of-stream marker"
    (tmp_path / "e.tsv").write_bytes(b"")
    cases["e.tsv"] = "empty"
    for name, why in cases.items():
        found = damage(tmp_path / name)
        assert found is not None and why in found, (name, found)


def test_a_repair_command_repeats_the_users_own_command(tmp_path, monkeypatch):
    argv = ["--cores", "2", "--configfile", "my study.yaml", "--directory", "/data/run", "results/figures"]
    assert rerun.from_argv(argv) == {"base": ["snakemake", "--cores", "2", "--directory", "/data/run", "--configfile",
                                              "my study.yaml"], "targets": ["results/figures"], "own_targets": True,
                                     "dryrun": False,
                                     "plain_dryrun": False, "forced": {"all": False, "targets": False, "run": []},
                                     "configfiles": ["my study.yaml"]}
    monkeypatch.setenv(rerun.ENV, "")  # none remembered; restored after the test
    assert rerun.command(["x.parquet"]) == ("snakemake --cores 1 -R x.parquet -- results/figures, with your run's "
                                            "own --configfile and options")  # outside a run: the shape of the command
    rerun.remember(argv)  # as the workflow's main process does; its jobs inherit the environment
    bad = tmp_path / "measurements.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(OpcostError) as e:
        io.read_parquet(bad, tables.MEASUREMENTS)
    assert str(e.value).endswith(f"snakemake --cores 2 --directory /data/run --configfile 'my study.yaml' -R {bad} "
                                 "-- results/figures)")
    # its report: of the targets it made (the default target's report wants results/advise/advise.png too)
    assert rerun.report_command() == ("snakemake --cores 2 --directory /data/run --configfile 'my study.yaml' "
                                      "--report report.html -- results/figures")
    rerun.remember(argv[:-1])  # no target named: the default target's report
    assert rerun.report_command().endswith("--report report.html")


def test_a_run_whose_every_workload_fails_ends_with_its_summary(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    cfg.update(models={"broken": cfg["models"]["broken"]}, predict_only={}, sweeps=[],
               placement={"tiers": {"dram": {"numa": 0}}}, profile={**cfg["profile"], "chunks": 1})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = snakemake("--configfile", "c.yaml", "--cores", "1", cwd=tmp_path)  # rc 0: the run itself went well
    summary = (tmp_path / "results" / "summary.txt").read_text()
    assert "No workload was predicted (see the failures below)." in summary
    assert "Coverage loop: no workload to cover (none was extracted; see the failures below)." in summary
    assert ("FAILED broken/inference/b2 (extract, e2e, insitu, trace): model broken: tests.tiny_models:"
            "explode raised RuntimeError: this factory always fails") in summary
    assert summary in proc.stderr and "a bug in opcost" not in proc.stderr
    assert "gpuGetDeviceCount" not in proc.stderr  # no CUDA probing noise on a CPU run


def test_a_strict_placement_tier_the_host_lacks_stops_the_run_before_any_measurement(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    cfg["models"] = {"mlp": cfg["models"]["mlp"]}
    cfg["placement"] = {"tiers": {"dram": {"numa": 0}, "absent": {"numa": 63}}, "on_missing": "strict"}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    measuring = [f"results/{stage}/mlp/inference_b2.parquet" for stage in ("e2e", "insitu")]
    proc = snakemake("--configfile", "c.yaml", "--cores", "1", *measuring, cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "absent" in proc.stderr and "NUMA node 63" in proc.stderr
    for stage in ("e2e", "insitu"):
        assert not (tmp_path / "results" / stage).exists(), stage


def test_the_check_before_the_first_job_builds_an_entry_given_under_several_names_once(tmp_path):
    """A study that repeats one model entry under many names (a sweep of hosts or seeds) has it built and run once
    by the check before the first job, not once per name; an entry that fails is named under each of its names."""
    counted = {"model": "tests.tiny_models:make_counted", "kwargs": {"path": str(tmp_path / "one")},
               "input_shapes": [[8]]}
    assert preflight.problems(validate({"models": {"a": counted}, "batch_sizes": [2]})) == []
    once = (tmp_path / "one").read_text().count("built")
    assert once >= 1  # the check builds the model
    counted["kwargs"]["path"] = str(tmp_path / "many")
    assert preflight.problems(validate({"models": {f"m{i}": counted for i in range(5)}, "batch_sizes": [2]})) == []
    assert (tmp_path / "many").read_text().count("built") == once
    broken = {"model": "nowhere:make"}
    found = preflight.problems(validate({"models": {"x": broken, "y": broken}, "batch_sizes": [2]}))
    assert [line.split(":")[0] for line in found] == ["model x", "model y"]


def test_an_answer_far_past_what_the_database_measured_cites_no_accuracy_figure(tiny_run):
    """An MLP profiled at batch 2, asked at batch 4096: predicted 60x its time, outside its interval, and the answer
    quoted the accuracy table's 7.7% for models never profiled. An answer mostly estimated more than 10x past any
    measured configuration of its op types now says that no figure covers it, and names the farthest."""
    db = tiny_run / "results" / "db"
    code, out, err = _cli("predict", "mlp", "--batch", 4096, "--db", db, "--config", TINY, "--no-trace")
    assert code == 0, err
    said = out.strip().splitlines()[-1]
    assert said.startswith("what to expect: 100% of its operator time is estimated more than 10x past") and \
        "median |error|" not in said and "farthest: " in said, said
    code, out, err = _cli("predict", "mlp", "--batch", 3, "--db", db, "--config", TINY, "--no-trace")
    assert code == 0 and "more than 10x past" not in out and "median |error|" in out.strip().splitlines()[-1], out
