"""The user documents stay true: README's accuracy section is what benchmarks/accuracy_table.py renders from the
benchmarks' records, every YAML block of README.md and config/README.md is a config the schema accepts, and a
benchmark run with --record writes the record the table is made from."""
import copy
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from opcost.config import validate
from opcost.model.sources import check_source

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "config" / "README.md"]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.M | re.S)


def _accuracy_table():
    spec = importlib.util.spec_from_file_location("accuracy_table", ROOT / "benchmarks" / "accuracy_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while the module executes
    spec.loader.exec_module(module)
    return module


def test_readme_accuracy_section_is_the_rendered_table():
    table = _accuracy_table()
    records = table.load_records()
    readme = (ROOT / "README.md").read_text()
    start, end = readme.index(table.BEGIN), readme.index(table.END) + len(table.END)
    assert readme[start:end] == table.readme_section(records), "run: python benchmarks/accuracy_table.py"
    assert (ROOT / "docs" / "accuracy.md").read_text() == table.document(records), \
        "run: python benchmarks/accuracy_table.py"
    assert len(table.rows(records)) >= len(table.SHOWN) - 1  # every benchmark with a record shows its figures
    assert table.TRUST.read_text() == table.trust_figures(records), "run: python benchmarks/accuracy_table.py"


def test_an_answer_says_what_the_accuracy_table_gives_for_its_kind():
    from opcost.report import trust

    assert trust.kind("cpu", "inference", 0.0, convolutional=True) == "cnn_inference"
    assert trust.kind("cpu", "inference", 0.0, convolutional=False, attention=True) == "transformer_small"
    assert trust.kind("cpu", "inference", 0.0, convolutional=False) == "cnn_inference"  # an MLP: the four models' row
    assert trust.kind("cpu", "inference", 0.6, convolutional=True) == "unseen_default"  # mostly estimated
    assert trust.kind("cpu", "decode512", 0.5, convolutional=False) == "decode_4x"
    assert trust.kind("cpu", "decode512", 0.0, convolutional=False, beyond=8.0) == "decode_16x"  # far past measured
    assert trust.kind("cpu", "decode512", 0.0, convolutional=False, beyond=1.0) == "decode_measured"
    assert trust.kind("cpu", "inference", 0.0, convolutional=True, tier="far") == "tier"  # a slowdown, not a time
    assert trust.kind("cuda:0", "training", 0.0, convolutional=True) == "gpu_measured"
    rows = trust.figures()
    assert set(rows) == {a.key for a in _accuracy_table().ANSWERS}  # every kind predict can name has its row
    line = trust.expect("unseen_default")
    assert line.startswith(f"what to expect ({rows['unseen_default']['what']}): median |error| ")
    assert rows["unseen_default"]["ref"] in line and rows["unseen_default"]["when"] in line
    assert trust.expect("energy").endswith("not measured; take it as a first answer")


def test_every_question_of_the_readme_table_names_what_its_record_holds():
    """README's rows (ANSWERS) name records that exist and SUMMARY keys their records hold: a renamed record or key
    fails here instead of turning a measured figure into "not measured"."""
    table = _accuracy_table()
    by_name = {r["name"]: r for r in table.load_records()}
    for answer in table.ANSWERS:
        if answer.record is None:
            continue
        assert answer.record in by_name, answer
        keys = {k for line in by_name[answer.record]["summaries"] for k in line}
        wanted = [k for k in (*answer.plain, *answer.ref, *answer.ded, answer.n, answer.per_line) if k]
        assert wanted and set(wanted) <= keys, (answer.what, set(wanted) - keys)
        row = table.answer_row(answer, by_name)
        for keys, shown in ((answer.plain, row[1]), (answer.ref, row[2]), (answer.ded, row[3])):
            assert shown != table.NOT_MEASURED or not keys[0], (answer.what, keys)


def test_a_gpu_record_older_than_a_change_to_the_gpu_path_is_shown_as_stale():
    table = _accuracy_table()
    root = table._git("rev-list", "--max-parents=0", "HEAD").split()[0]  # the repository's first commit
    gpu = {"name": "x", "date": "2026-01-01", "host": {"gpu": "NVIDIA H200"}, "command": "bash benchmarks/gpu_check.sh",
           "summaries": [{"err_isolated_ov_vs_dedicated": 0.05}], "benchmark": "gpu_check"}
    assert table.stale({**gpu, "commit": root}).startswith("the GPU path changed since (")
    assert table.stale({**gpu, "commit": table._git("rev-parse", "HEAD")}) is None
    answer = table.Answer("gpu_measured", "a GPU", "x", per_line="err_isolated_ov_vs_dedicated")
    row = table.answer_row(answer, {"x": {**gpu, "commit": root}})
    assert row[3] == "stale: 5.0% (worst 5.0%)" and "**stale**: the GPU path changed since" in row[5]
    cpu = {**gpu, "host": {"cpu": "x"}, "commit": root, "files": {"config/config.yaml": "0" * 12}}
    assert table.stale(cpu) == "config/config.yaml changed since"  # a file its command names, changed
    assert table.stale({**cpu, "files": {}}) is None  # a CPU record: the GPU path is not what it rests on


def test_readme_says_accuracy_only_in_its_section():
    """Nothing about accuracy outside the generated section: no percentage in README's prose elsewhere (commands
    and code, such as `--budget 25%`, aside)."""
    table = _accuracy_table()
    readme = (ROOT / "README.md").read_text()
    outside = readme[:readme.index(table.BEGIN)] + readme[readme.index(table.END):]
    prose = re.sub(r"`[^`]*`", "", FENCE.sub("", "\n".join(line for line in outside.splitlines()
                                                           if not line.startswith("    "))))
    assert not re.findall(r"\d+(?:\.\d+)?\s?%", prose)


def test_every_record_holds_what_the_table_needs():
    table = _accuracy_table()
    for rec in table.load_records():
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}.*", rec["date"]), rec["name"]
        assert rec["command"].split()[1].startswith("benchmarks/"), rec["name"]
        assert (ROOT / rec["command"].split()[1]).exists(), f"{rec['name']}: no such benchmark"
        assert rec["summaries"] and all(isinstance(s, dict) for s in rec["summaries"]), rec["name"]
        if rec.get("seeded_from"):  # carried over from the dated log: its date is a heading there
            heading = rec["seeded_from"].removeprefix("benchmarks/records/measurements.md, ").split(" (")[0]
            assert f"## {heading}" in (ROOT / "benchmarks" / "records" / "measurements.md").read_text(), rec["name"]


def test_readme_fits_a_first_reading():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    narrative = re.compile(r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth) run\b|\blatest\b"
                           r"|\bthe one before\b", re.I)
    for doc in DOCS:
        assert not narrative.findall(doc.read_text()), f"{doc.name} tells run history"


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target
    config_doc = (ROOT / "config" / "README.md").read_text()
    for anchor in re.findall(r"\(config/README\.md#([^)]+)\)", readme):
        assert f"## {anchor.replace('-', ' ')}".lower() in config_doc.lower(), anchor


def _yaml_blocks():
    for doc in DOCS:
        for i, (info, body) in enumerate(FENCE.findall(doc.read_text())):
            words = info.split()
            if words and words[0] in ("yaml", "yml"):
                yield pytest.param(body, "fragment" in words[1:], id=f"{doc.relative_to(ROOT)}:block{i}")


def _merged(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def test_documents_hold_yaml_blocks():
    blocks = list(_yaml_blocks())
    assert len(blocks) >= 6 and any(p.values[1] for p in blocks) and any(not p.values[1] for p in blocks)


@pytest.mark.parametrize("text, fragment", list(_yaml_blocks()))
def test_yaml_block_is_a_valid_config(text, fragment):
    """A complete config validates as it is; a fragment (```yaml fragment) over the shipped config/config.yaml.
    Every model entry's source must resolve (names timm and transformers know, kwargs their configs have), except
    a user's own module:callable, which the example cannot ship."""
    block = yaml.safe_load(text)
    if fragment:
        assert "models" not in block, "a fragment that names models is a complete config: drop `fragment`"
        block = _merged(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), block)
    cfg = validate(block)
    for name, entry in cfg["models"].items():
        target = entry.get("model") or name
        if ":" in target and not target.startswith(("hf:", "timm:")):
            continue  # the user's module:callable (my_models:make_net)
        check_source(name, entry, "cpu")


def test_record_flag_writes_the_record_and_leaves_argparse_alone(tmp_path):
    """A benchmark run with --record: its own argparse never sees the flag, and summary() writes
    <benchmark>@<config stem>.json with the date, host, command and every SUMMARY line of the run."""
    script = tmp_path / "probe.py"
    script.write_text(
        "import argparse, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
        "from _common import summary\n"
        "ap = argparse.ArgumentParser(); ap.add_argument('--config'); ap.add_argument('--smoke', action='store_true')\n"
        "args = ap.parse_args()\n"
        "summary(model='a', err=0.25, n=3)\n"
        "summary(model='b', err=float('nan'))\n")
    env = {k: v for k, v in os.environ.items() if k != "OPCOST_RECORD"}
    env["OPCOST_RECORDS"] = str(tmp_path / "records")
    done = subprocess.run([sys.executable, str(script), "--record", "--config", "x/my.yaml"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "SUMMARY model=a err=0.25 n=3" in done.stdout
    rec = json.loads((tmp_path / "records" / "probe@my.json").read_text())
    assert rec["benchmark"] == "probe" and rec["command"].endswith("probe.py --config x/my.yaml")
    assert rec["summaries"] == [{"model": "a", "err": 0.25, "n": 3}, {"model": "b", "err": "nan"}]
    assert rec["host"]["cores"] >= 1 and "cpu" in rec["host"] and re.match(r"\d{4}-\d{2}-\d{2}T", rec["date"])
    # the evidence: the checkout's commit, what had changed since, a hash of each file the command names
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert rec["commit"] == (head or None) and isinstance(rec["uncommitted"], list) and rec["files"] == {}
    config = tmp_path / "named.yaml"
    config.write_text("models: {}\n")
    named = subprocess.run([sys.executable, str(script), "--record", "--config", str(config)], env=env,
                           capture_output=True, text=True, timeout=120)
    assert named.returncode == 0, named.stderr
    digest = __import__("hashlib").sha1(b"models: {}\n").hexdigest()[:12]
    assert json.loads((tmp_path / "records" / "probe@named.json").read_text())["files"] == {str(config): digest}
    again = subprocess.run([sys.executable, str(script), "--config", "x/my.yaml"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and json.loads((tmp_path / "records" / "probe@my.json").read_text()) == rec, \
        "without --record nothing is written"
    smoke = subprocess.run([sys.executable, str(script), "--record", "--smoke"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert smoke.returncode == 0 and not (tmp_path / "records" / "probe.json").exists(), "a --smoke run records"


def test_table_shows_a_new_record_in_place_of_the_old(tmp_path):
    """A recorded run replaces its benchmark's row; figures the mapping does not name are not shown."""
    table = _accuracy_table()
    rec = {"benchmark": "transformer_accuracy", "date": "2030-01-02T03:04:05+00:00",
           "host": {"cpu": "Some CPU", "cores": 8, "gpu": None}, "command": "python benchmarks/x.py --threads 1",
           "summaries": [{"workloads": 9, "median_abs_err_rot": 0.0412, "median_abs_err_ded": 0.05, "wall_s": 3.0}]}
    (tmp_path / "transformer_accuracy.json").write_text(json.dumps(rec))
    rows = table.rows(table.load_records(tmp_path))
    assert [r[4] for r in rows] == ["4.1%", "5.0%"]
    assert rows[0][:3] == ("2030-01-02", "Some CPU, 8 cores", "`python benchmarks/x.py --threads 1`")


def test_llama_recipe_builds_the_stack_without_and_with_its_head():
    """README's Llama-style recipe: `hf:llama` has no language-model head, `hf:LlamaForCausalLM` has it."""
    import torch

    from opcost.model.sources import load_model

    text = next(body for _, body in FENCE.findall((ROOT / "README.md").read_text()) if "llama_body" in body)
    entries = yaml.safe_load(text)["models"]
    vocab = entries["llama_lm"]["kwargs"]["vocab_size"]
    heads = {name: [path for path, m in load_model(name, entry).module.named_modules()
                    if isinstance(m, torch.nn.Linear) and m.out_features == vocab]
             for name, entry in entries.items()}
    assert heads == {"llama_body": [], "llama_lm": ["model.lm_head"]}


def test_the_method_error_of_an_untimed_database_covers_the_tables_worst_for_measured_models():
    from opcost.analysis.interval import UNTIMED
    from opcost.report import trust

    worst = [float(m) / 100 for k in ("cnn_inference", "cnn_training", "transformer_small", "transformer_real")
             for m in re.findall(r"worst ([0-9.]+)%", trust.figures()[k]["ref"])]
    assert worst and UNTIMED >= max(worst), (UNTIMED, worst)
