"""Each stage reads only the config keys of its rule's params (opcost.config.StageConfig), so that a changed key
reruns exactly the jobs it shapes and no config change can leave a stale result."""
import pandas as pd
import pytest
import yaml

from opcost import io, stages, tables
from opcost.config import STAGE_KEYS, StageConfig, UndeclaredKey, stage_settings, validate
from opcost.report.figures import FigureFiles
from tests.helpers import TINY

MODEL, MODE, BATCH = "mlp", "inference", 2


@pytest.fixture(scope="module")
def cfg():
    return validate(yaml.safe_load(TINY.read_text()))


def test_a_stage_config_holds_its_rules_params_and_refuses_every_other_key(cfg):
    c = StageConfig.of(cfg, "e2e", MODEL)
    assert c["threads"] == cfg["threads"] and c["e2e"] == cfg["e2e"]
    # a per-workload stage sees its own model's entry, without the keys that only choose workloads
    assert c["models"] == {MODEL: {k: v for k, v in cfg["models"][MODEL].items()
                                   if k not in ("batch_sizes", "modes", "context_lens")}}
    for read in (lambda: c["profile"], lambda: c.get("profile", {}), lambda: "profile" in c):
        with pytest.raises(UndeclaredKey, match="stage e2e.*'profile'"):
            read()
    # a section declared by one of its settings (the trace stage: profile.e2e_every): that setting only
    trace = StageConfig.of(cfg, "trace", MODEL)
    assert trace["profile"]["e2e_every"] == cfg["profile"]["e2e_every"]
    for read in (lambda: trace["profile"]["chunks"], lambda: trace["profile"].get("chunks"),
                 lambda: "chunks" in trace.get("profile")):
        with pytest.raises(UndeclaredKey, match="stage trace \\(profile\\).*'chunks'"):
            read()
    # the config's order stays: the first placement tier is the fast one
    assert list(StageConfig.of(cfg, "profile")["placement"]["tiers"]) == ["dram", "dram_b", "absent"]
    # what a script passes: the rule's params string, run mark and all
    params = stage_settings(cfg, "e2e", MODEL) + " run mark 123"
    assert dict(StageConfig.from_params("e2e", params, MODEL)) == dict(c)


def test_a_stage_reading_an_undeclared_key_fails_its_job_instead_of_recording_a_failure(cfg, tmp_path):
    """Per-workload stages turn a workload's error into a failure row and go on; a key outside the params is a bug
    of the stage, never the workload's: the job fails."""
    narrow = StageConfig.of(cfg, "placement_tiers")  # device and placement: no models, no dtype
    with pytest.raises(UndeclaredKey):
        stages.extract(narrow, MODEL, MODE, BATCH, tmp_path / "l.parquet", tmp_path / "f.parquet")
    assert not (tmp_path / "f.parquet").exists()


def _no_failure(path) -> None:
    f = io.read_parquet(path, tables.FAILURES)
    assert not (f["kind"] == "failed").any(), f["reason"].tolist()


def test_every_stage_runs_on_its_rules_params_alone(cfg, tiny_run, tmp_path):
    """Every stage, run on the tiny run's inputs with nothing but its rule's params, completes (a read outside them
    raises UndeclaredKey)."""
    r, out = tiny_run / "results", tmp_path
    wl = f"{MODEL}/{MODE}_b{BATCH}"

    def of(stage, model=None):
        ran.add(stage)
        return StageConfig.of(cfg, stage, model)

    ran: set[str] = set()
    stages.extract(of("extract", MODEL), MODEL, MODE, BATCH, out / "layers.parquet", out / "f_extract.parquet")
    _no_failure(out / "f_extract.parquet")
    stages.extract_sweeps(of("sweeps"), out / "sweeps.parquet", out / "f_sweeps.parquet")
    assert len(io.read_parquet(out / "sweeps.parquet", tables.LAYERS))
    stages.placement_tiers(of("placement_tiers"), out / "tiers.json")
    meas = stages.profile(of("profile"), r / "db/configs.parquet", 0, 0, None, out / "m.parquet", out / "s.parquet",
                          out / "pe.parquet", journal_dir=out / "journal")
    assert len(meas)
    stages.e2e(of("e2e", MODEL), MODEL, MODE, BATCH, out / "e2e.parquet", out / "e2e_s.parquet", out / "f_e2e.parquet")
    _no_failure(out / "f_e2e.parquet")
    stages.e2e_tier(of("e2e_tier", MODEL), MODEL, MODE, BATCH, "dram_b", None, out / "tier.parquet",
                    out / "tier_s.parquet", out / "f_tier.parquet")
    _no_failure(out / "f_tier.parquet")
    stages.alone(of("alone", MODEL), MODEL, MODE, BATCH, out / "layers.parquet", out / "alone.parquet",
                 out / "alone_s.parquet", out / "f_alone.parquet", journal_dir=out / "journal")
    _no_failure(out / "f_alone.parquet")
    assert set(io.read_parquet(out / "alone.parquet", tables.MEASUREMENTS)["source"]) == {"alone", "in_order"}
    stages.insitu(of("insitu", MODEL), MODEL, MODE, BATCH, out / "insitu.parquet", out / "insitu_s.parquet",
                  out / "insitu_e2e.parquet", out / "f_insitu.parquet")
    _no_failure(out / "f_insitu.parquet")
    stages.trace(of("trace", MODEL), MODEL, MODE, BATCH, out / "trace.json.gz",
                 {p: out / f"trace.{p}.parquet" for p in stages.TRACE_PARTS}, out / "f_trace.parquet")
    _no_failure(out / "f_trace.parquet")
    stages.coplace(of("coplace", MODEL), MODEL, MODE, BATCH, out / "coplace.parquet", out / "coplace.json",
                   out / "f_coplace.parquet")
    _no_failure(out / "f_coplace.parquet")

    layers = sorted(str(p) for p in (r / "layers").glob("*/*.parquet") if "mlp_wide" not in str(p))
    traces = {part: sorted(str(p) for p in (r / "trace").glob(f"*/*.{part}.parquet"))
              for part in ("overheads", "op_types", "iterations", "overhead_samples")}
    ev = stages.evaluate(of("evaluate"), 0, stages.EvaluationFiles(
        configs=r / "db/configs.parquet", previous=None, layers=layers,
        measurements=sorted((r / "profile").glob("iter0_chunk*.parquet")), e2e=[r / "db/e2e.parquet"],
        overheads=traces["overheads"], op_types=traces["op_types"]), out / "evaluation.json")
    assert ev["workloads"]
    pred = stages.validate(of("validate"), stages.ValidationFiles(
        layers=layers, measurements=r / "db/measurements.parquet", e2e=r / "db/e2e.parquet",
        overheads=traces["overheads"], op_types=traces["op_types"]), stages.ValidationOutputs(
        predictions=out / "p.parquet", tsv=out / "p.tsv", consistency=out / "c.parquet", tiers=out / "t.parquet"))
    assert len(pred)
    db = {name: r / f"db/{name}.parquet" for name in ("layers", "measurements", "e2e", "overheads")}
    unseen = stages.predict_unseen(of("unseen"), db, [r / "layers/mlp_wide/inference_b2.parquet"],
                                   [r / "e2e/mlp_wide/inference_b2.parquet"], out / "u.parquet", out / "u.tsv")
    assert list(unseen["model"]) == ["mlp_wide"]
    # the tiny run has no decoder, so no generate() question (tests/test_decode.py runs one through the workflow)
    assert stages.validate_generate(of("generate"), [], db, out / "g.parquet", out / "g.tsv").empty
    stages.make_figures(of("figures"), FigureFiles(
        layers=layers, measurements=r / "db/measurements.parquet", e2e=r / "db/e2e.parquet",
        predictions=r / "validation/predictions.parquet", consistency=r / "validation/consistency.parquet",
        loop=r / "loop/summary.json", tiers=r / "placement/tiers.json", coplace=[r / f"coplace/{wl}.summary.json"],
        traces={p: traces[p] for p in ("op_types", "iterations", "overhead_samples")},
        tier_costs=r / "validation/tiers.parquet"), out / "figures", failures=r / "failures.tsv",
        summary=out / "summary.txt")
    assert (out / "figures" / "breakdown.png").exists() and (out / "summary.txt").read_text()
    workloads = {(m, mode, b): out / f"advise_{m}_{mode}_b{b}.yaml"
                 for m, mode, b in pd.read_parquet(r / "db/layers.parquet")[["model", "mode", "batch"]]
                 .drop_duplicates().itertuples(index=False) if m in ("mlp", "tiny_dlrm")}
    stages.advise(of("advise"), db, workloads, out / "advise.png")
    assert ran == set(STAGE_KEYS)  # every stage of the workflow was run


def test_an_edit_of_a_models_own_code_changes_its_jobs_params(tmp_path, monkeypatch):
    """A `module:callable` model whose module file was edited after a run: the run said "Nothing to be done" and
    kept the old model's results as current. The file's fingerprint is in the params of every job of that model."""
    from opcost.config import StageConfig, stage_settings, validate

    code = "from tests.tiny_models import make_mlp\n\ndef make():\n    return make_mlp({})\n"
    (tmp_path / "my_nets.py").write_text(code.format(16))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = validate({"models": {"net": {"model": "my_nets:make", "input_shapes": [[8]]}, "resnet18": {}}})
    before = {stage: stage_settings(cfg, stage, "net") for stage in ("extract", "e2e")}
    other = stage_settings(cfg, "extract", "resnet18")
    profile = stage_settings(cfg, "profile")
    (tmp_path / "my_nets.py").write_text(code.format(256))
    assert all(stage_settings(cfg, stage, "net") != p for stage, p in before.items())
    assert stage_settings(cfg, "profile") != profile  # the profiling jobs hold every model's entry
    assert stage_settings(cfg, "extract", "resnet18") == other  # a model of another source: unchanged
    import json

    assert "code" in json.loads(before["extract"])
    assert StageConfig("extract", json.loads(before["extract"]), "net")["models"]["net"]["model"] == "my_nets:make"
