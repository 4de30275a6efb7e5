"""Decode steps (mode decode<L>): one token per sequence over a key/value cache held at L tokens, on a tiny Llama."""
import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from opcost.check import check_workload
from opcost.config import validate, workloads
from opcost.database import catalog
from opcost.errors import OpcostError
from opcost.model.extract import extract
from opcost.model.sources import load_model
from opcost.model.workload import decode_context, is_decode, make_workload, op_mode
from opcost.tables import CARRIED

KWARGS = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 8, "intermediate_size": 64, "vocab_size": 128}
LLAMA = {"model": "hf:llama", "kwargs": KWARGS}
BATCH = 2


def cache_of(wl):
    return wl.model.module.decoding.cache


@pytest.fixture(scope="module")
def decode16():
    return make_workload(load_model("tiny_llama", LLAMA), BATCH, "decode16")


def test_mode_names():
    assert decode_context("decode512") == 512 and is_decode("decode16")
    assert decode_context("inference") is None and not is_decode("decode") and not is_decode("decode0")
    assert op_mode("decode512") == "inference" and op_mode("training") == "training"


def test_the_cache_holds_the_context_and_each_step_one_token(decode16):
    wl = decode16
    cache = cache_of(wl)
    assert cache.get_seq_length() == 16
    # the cache tensors: (batch, kv heads, L, head dim), contiguous as generation's cat leaves them
    keys = cache.layers[0].keys
    assert tuple(keys.shape) == (BATCH, 2, 16, 8) and keys.is_contiguous()
    ids, positions = wl.inputs  # as generate() passes them: one token id and its position per sequence
    assert tuple(ids.shape) == (BATCH, 1) and positions.flatten().tolist() == [16] * BATCH
    with wl.grad_context():
        first = wl.forward().last_hidden_state
    wl.step()
    wl.step()
    assert cache.get_seq_length() == 16 and cache.layers[0].keys is keys  # put back: the cache never grows
    with wl.grad_context():
        again = wl.forward().last_hidden_state
    assert tuple(first.shape) == (BATCH, 1, 32) and torch.equal(first, again)


def test_a_step_is_the_next_token_of_the_prefilled_sequence(decode16):
    """The step's output is the last position of a forward pass without a cache over the L prefilled tokens and the
    new one: the cache holds exactly the prefill, and the step's token sits at position L."""
    wl = decode16
    state = wl.model.module.decoding
    with torch.inference_mode():
        step = wl.forward().last_hidden_state[:, -1]
        full = wl.model.module.model(input_ids=torch.cat([state.prefill, wl.inputs[0]], dim=1)).last_hidden_state
    torch.testing.assert_close(step, full[:, -1], rtol=1e-4, atol=1e-5)


def test_extraction_records_one_step_with_the_cache_as_inputs(decode16):
    layers = extract(decode16)
    assert set(layers["mode"]) == {"decode16"}
    emb = layers[layers["op_type"] == "Embedding"]
    assert json.loads(emb["inputs"].iloc[0])[0]["T"] == [BATCH, 1]  # one token per sequence
    # the cache update: cat of the L cached tokens (keys, then values) and the step's one
    cats = layers[layers["op_type"] == "cat"]
    firsts = [json.loads(s)[0]["T"] for s in cats["inputs"]]
    assert sum(n for n, t in zip(cats["count"], firsts) if t == [BATCH, 2, 16, 8]) == 2  # one layer: keys, values
    # the cached tensors are carried from step to step; the step's new keys and values come from its own operators
    feeds = [call for f, t in zip(cats["feeds"], firsts) if t == [BATCH, 2, 16, 8] for call in json.loads(f)]
    assert len(feeds) == 2 and all(call[0] == CARRIED and isinstance(call[1], list) for call in feeds)
    carried = [f for fs in layers["feeds"] for call in json.loads(fs) for f in call if f == CARRIED]
    assert len(carried) == 2  # nothing else is marked: parameters and the token ids are not carried
    sdpa = json.loads(layers.loc[layers["op_type"] == "scaled_dot_product_attention", "inputs"].iloc[0])
    assert sdpa[0]["T"] == [BATCH, 4, 1, 8] and sdpa[1]["T"] == [BATCH, 2, 17, 8]
    # its operators are inference operators: catalogued as such, with ids shared across context lengths
    assert set(catalog(layers)["mode"]) == {"inference"}
    other = extract(make_workload(load_model("tiny_llama", LLAMA), BATCH, "decode32"))
    shared = set(layers["config_id"]) & set(other["config_id"])
    assert set(layers.loc[layers["config_id"].isin(shared), "op_type"]) >= {"Linear", "Embedding"}
    assert not set(layers.loc[layers["config_id"].isin(shared), "op_type"]) & {"scaled_dot_product_attention"}


def test_a_decode_attention_sweep_point_records_what_a_decode_step_does(decode16):
    """The ``decode_attention`` sweep: each layer's cache update (cat of the L cached tokens and the step's one, the
    cache an input no operator made) and SDPA of one query over L + 1 keys with ``enable_gqa``, at the shapes the
    tiny Llama's step records; its modes are inference."""
    cfg = validate({"models": {"a": LLAMA}, "modes": ["decode"], "batch_sizes": [BATCH], "sweeps": [
        {"op": "decode_attention", "grid": {"context": [16], "heads": [4], "heads_kv": [2, 3], "head_dim": [8]},
         "depth": 2}]})
    assert "sweep-decode_attention-ctx16-d8-n4-kv3" not in cfg["models"]  # 3 key/value heads do not divide 4
    name = "sweep-decode_attention-ctx16-d8-n4-kv2"
    assert cfg["models"][name]["input_shapes"] == [[1, 64]] + [[2, 16, 8]] * 4  # each layer's keys and values
    assert workloads(cfg, "sweeps") == [(name, "inference", BATCH)]
    point = extract(make_workload(load_model(name, cfg["models"][name]), BATCH, "inference"))
    step = extract(decode16)

    def calls(layers, op):  # input shapes -> calls per iteration
        rows, out = layers[layers["op_type"] == op], {}
        for inputs, n in zip(rows["inputs"], rows["count"]):
            shapes = tuple(tuple(t["T"]) for t in json.loads(inputs))
            out[shapes] = out.get(shapes, 0) + int(n)
        return out

    cache = ((BATCH, 2, 16, 8), (BATCH, 2, 1, 8))
    assert calls(point, "cat")[cache] == 4 and calls(step, "cat")[cache] == 2  # keys and values, per layer
    attended = ((BATCH, 4, 1, 8), (BATCH, 2, 17, 8), (BATCH, 2, 17, 8))
    assert calls(point, "scaled_dot_product_attention") == {attended: 2}
    assert calls(step, "scaled_dot_product_attention") == {attended: 1}
    kwargs = [sorted(json.loads(p)["kwargs"]["D"]) for p in
              point.loc[point["op_type"] == "scaled_dot_product_attention", "params"]]
    assert kwargs == [["enable_gqa", "scale"]]
    cats = point[point["op_type"] == "cat"]
    fed = [json.loads(f)[0] for f, i in zip(cats["feeds"], cats["inputs"]) if json.loads(i)[0]["T"] == [*cache[0]]]
    assert fed and all(call[0] == CARRIED for call in fed)  # the cache: made by no operator of the step, carried


def test_fresh_rotation_reads_each_layers_cache_as_the_round_before_left_it():
    """cache fresh: an input the workload carries between steps (the cached keys and values, `feeds` "carried") is
    never rewritten before its call, as an input no recorded call produced is, and each call of the configuration
    reads its own copy, as each layer reads its own cache: a round moves the step's bytes between two reads of it,
    so a cache that a long context's traffic evicts is read from memory in the rotation as in generation. The same
    configurations with the mark removed: one tensor for both calls, rewritten before each."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from opcost.measure.profile import ProfileSettings, profile_configs
    from opcost.measure.timing import TimingSettings

    context = 1024  # a cache of 32,768 elements: as large as the inputs the rotation rewrites (replay.PARALLEL_NUMEL)
    two = {**LLAMA, "kwargs": {**KWARGS, "num_hidden_layers": 2}}  # each cache update's configuration called twice
    configs = catalog(extract(make_workload(load_model("tiny_llama", two), BATCH, f"decode{context}")))
    fast = TimingSettings(max_seconds=0.05, warmup_s=0.0, min_samples=5, max_samples=5, target_rel_ci=1e-9)

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.read, self.written = [], set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.cat.default and args[0][0].shape[-2] == context:
                self.read.append(args[0][0].data_ptr())  # a cached tensor the cache update reads
            elif func._schema.name in ("aten::mul_", "aten::bitwise_or_"):
                self.written.add(args[0].data_ptr())  # a rewrite (opcost.model.replay.refresher)
            return func(*args, **(kwargs or {}))

    def profiled(table):
        with Seen() as seen:
            meas, _ = profile_configs(table, {"tiny_llama": two}, "cpu", "float32", ProfileSettings(fast))
        assert (meas["status"] == "ok").all()
        return seen

    carried = profiled(configs)  # the last two rounds: two layers' keys and values, four reads a round
    assert len(set(carried.read[-8:])) == 4 and carried.read[-8:-4] == carried.read[-4:]
    assert not set(carried.read) & carried.written
    plain = profiled(configs.assign(feeds=configs["feeds"].str.replace(f'"{CARRIED}"', "null")))
    assert len(set(plain.read[-8:])) == 2 and set(plain.read[-8:]) <= plain.written  # one tensor per configuration


@pytest.mark.parametrize("context", [16, 40])
def test_every_configuration_replays(context):
    res = check_workload("tiny_llama", LLAMA, BATCH, f"decode{context}")
    assert res.ok, res.first_failure()
    assert res.configs > 20


def test_a_model_without_a_cache_is_refused_in_one_line():
    with pytest.raises(OpcostError) as e:
        make_workload(load_model("r", {"model": "tests.tiny_models:make_mlp", "kwargs": {"width": 8},
                                       "input_shapes": [[8]]}), 2, "decode16")
    assert str(e.value).startswith("model r: decode16 steps a key/value cache") and "\n" not in str(e.value)
    with pytest.raises(OpcostError, match="unknown mode 'decode'"):
        make_workload(load_model("tiny_llama", LLAMA), 2, "decode")


def test_config_expands_decode_per_context_length():
    cfg = validate({"models": {"a": {**LLAMA, "modes": ["inference", "decode"], "context_lens": [128, 512]},
                               "b": {**LLAMA, "modes": ["decode", "decode64"]},
                               "c": {**LLAMA, "modes": ["prefill", "prefill32"], "batch_sizes": [1]}},
                    "batch_sizes": [1, 4], "context_lens": [64]})
    assert workloads(cfg) == [("a", "inference", 1), ("a", "inference", 4), ("a", "decode128", 1),
                              ("a", "decode128", 4), ("a", "decode512", 1), ("a", "decode512", 4),
                              ("b", "decode64", 1), ("b", "decode64", 4), ("c", "prefill64", 1),
                              ("c", "prefill32", 1)]
    assert validate({"models": {"a": {}}})["context_lens"] == [128]
    with pytest.raises(OpcostError, match=r"^config: models.a.context_lens\[0\]"):
        validate({"models": {"a": {"context_lens": [0]}}})
    with pytest.raises(OpcostError, match=r"^config: sweeps\[0\].modes\[0\]"):
        validate({"models": {"a": {}}, "sweeps": [{"op": "Linear", "modes": ["decode"]}]})
    # sweeps (chains of one operator) are no decoders: their points take the config's other modes
    sweeps = validate({"models": {"a": LLAMA}, "modes": ["decode"], "sweeps": [{"op": "Linear"}]})
    assert {m for _, m, _ in workloads(sweeps, "sweeps")} == {"inference"}


def test_preflight_names_each_model_that_cannot_decode_in_one_line():
    from opcost import preflight

    small = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64}
    cfg = validate({"models": {"llama": LLAMA, "gpt2": {"model": "hf:GPT2LMHeadModel", "kwargs": {"n_layer": 1}},
                               "bert": {"model": "hf:BertModel", "kwargs": small},
                               "bert_dec": {"model": "hf:BertModel", "kwargs": {**small, "is_decoder": True}},
                               "t5": {"model": "hf:t5", "kwargs": {"num_layers": 1}},
                               "mlp": {"model": "tests.tiny_models:make_mlp", "input_shapes": [[8]]},
                               "plain": {"model": "tests.tiny_models:make_mlp", "input_shapes": [[8]],
                                         "modes": ["inference"]}},
                    "modes": ["decode"], "batch_sizes": [1]})
    found = preflight.problems(cfg)
    assert [line.split(":")[0] for line in found] == ["model bert", "model t5", "model mlp"]
    assert all("\n" not in line and "decode" in line for line in found)
    assert "is an encoder (kwargs is_decoder: true makes it a decoder)" in found[0]
    assert "encoder-decoder" in found[1]
    assert "only transformers decoders" in found[2]


DECODE_CONFIG = Path(__file__).resolve().parent / "data" / "decode.yaml"
RUN = yaml.safe_load(DECODE_CONFIG.read_text())["models"]["tiny_llama"]  # its causal-LM class


@pytest.fixture(scope="module")
def decode_run(tmp_path_factory):
    """One real workflow run of a decode config: tiny_llama at contexts 16 and 64, batch 2 (about 2 minutes)."""
    from tests.helpers import snakemake

    work = tmp_path_factory.mktemp("decode")
    snakemake("--configfile", str(DECODE_CONFIG), "--cores", "1", cwd=work)
    return work


def test_the_workflow_measures_and_validates_decode_steps(decode_run):
    import pandas as pd

    results = decode_run / "results"
    for context in (16, 64):
        layers = pd.read_parquet(results / "layers" / "tiny_llama" / f"decode{context}_b2.parquet")
        cached = [json.loads(s)[0]["T"] for s in layers.loc[layers["op_type"] == "cat", "inputs"]]
        assert [2, 2, context, 8] in cached
    configs = pd.read_parquet(results / "db" / "configs.parquet")
    assert set(configs["mode"]) == {"inference"}
    measured = pd.read_parquet(results / "db" / "measurements.parquet")
    assert set(configs["config_id"]) <= set(measured["config_id"])  # every configuration profiled
    pred = pd.read_parquet(results / "validation" / "predictions.parquet")
    rows = pred[pred["source"] == "isolated+overhead"]
    assert sorted(rows["mode"]) == ["decode16", "decode64", "prefill16", "prefill64"]
    assert (rows["predicted_s"] > 0).all() and (rows["measured_s"] > 0).all()
    assert "tiny_llama/decode64/b2" in (results / "summary.txt").read_text()


def test_predict_a_decode_step_at_a_context_and_batch_never_measured(decode_run):
    """Attention's estimate grows with the context; the Linears' costs do not depend on it."""
    from opcost.analysis import estimate
    from opcost.analysis.decode import summary
    from opcost.database import read_db

    db_dir = decode_run / "results" / "db"
    db = read_db(db_dir)
    steps = {}
    for context in (256, 1024):
        layers = estimate.workload_layers(db, "tiny_llama", 3, f"decode{context}", RUN)
        steps[context] = summary(estimate.predict_workload(db, layers, db_dir), layers)
    small, large = steps[256], steps[1024]
    for s in (small, large):
        assert math.isfinite(s["step_s"]) and 0 < s["step_low_s"] <= s["step_s"] <= s["step_high_s"]
        assert s["tokens_per_s"] == pytest.approx(3 / s["step_s"])
    assert large["top_op_types_s"]["scaled_dot_product_attention"] > small["top_op_types_s"][
        "scaled_dot_product_attention"]
    assert large["top_op_types_s"]["Linear"] == pytest.approx(small["top_op_types_s"]["Linear"])
    # bytes read per step: the same weights, a cache of 2 tensors x batch x kv heads x L x head dim x 4 bytes
    assert large["weight_bytes"] == small["weight_bytes"] > 32 * 32 * 4
    assert small["kv_cache_bytes"] == 2 * 3 * 2 * 256 * 8 * 4 and large["kv_cache_bytes"] == 4 * small[
        "kv_cache_bytes"]


def test_a_predicted_step_never_gets_faster_as_the_context_grows(decode_run):
    """From the small decode run (contexts 16 and 64 measured at batch 2): the predicted step never falls as the
    context grows, at a batch never measured (3) from the shortest context on (16, 64, 256, 1,024: its estimates rest
    on the measured costs' monotone envelope, not on their noise), at the measured batch from the longest measured
    context on (measured steps are what they measured, noise included); a step with anything estimated has an
    interval of non-zero width."""
    from opcost.analysis import estimate
    from opcost.database import read_db

    db_dir = decode_run / "results" / "db"
    db = read_db(db_dir)
    for batch in (2, 3):
        steps = [estimate.predict_workload(db, estimate.workload_layers(db, "tiny_llama", batch, f"decode{c}", RUN),
                                           db_dir) for c in (16, 64, 256, 1024)]
        times = [p.predicted_s for p in steps][1 if batch == 2 else 0:]
        assert times == sorted(times), (batch, times)
        for p in steps:
            if p.estimated_s > 0:
                assert p.low_s < p.predicted_s < p.high_s, (batch, p.low_s, p.predicted_s, p.high_s)


def test_a_step_at_a_context_never_traced_takes_its_overhead_from_the_traced_steps_cache_bytes(decode_run):
    """The overhead of a step at a context and batch never traced: the least-squares fit of the traced decode steps'
    overheads in the key/value cache bytes a step reads (one slope for all models, an intercept per model), here
    the run's one model traced at contexts 16 and 64 (batch 2): the line through those two, floored at 0; a traced
    step keeps its own."""
    from opcost.analysis import estimate, overhead_sources
    from opcost.analysis.decode import cache_bytes
    from opcost.database import of_workload, read_db
    from opcost.model.modes import decode_context

    db_dir = decode_run / "results" / "db"
    db = read_db(db_dir)
    ov = db["overheads"]
    ov = ov[(ov["model"] == "tiny_llama") & ov["mode"].str.startswith("decode")]
    points = {cache_bytes(of_workload(db["layers"], "tiny_llama", int(b), m), decode_context(m)): float(o)
              for m, b, o in zip(ov["mode"], ov["batch"], ov["overhead_s"])}
    assert len(points) == 2
    (x0, y0), (x1, y1) = sorted(points.items())
    target = estimate.workload_layers(db, "tiny_llama", 3, "decode256", RUN)
    x = cache_bytes(target, 256)
    assert x == pytest.approx(x1 * (3 * 256) / (2 * 64))  # the cache grows with batch x context
    p = estimate.predict_workload(db, target, db_dir)
    assert p.overhead_from == "decode steps"
    rise = max((y1 - y0) / (x1 - x0), 0.0)  # the slope is held at 0 or above in the fit: a flat line at the mean
    line = y0 + rise * (x - x0) if rise > 0 else (y0 + y1) / 2
    assert p.overhead_s == pytest.approx(max(line, 0.0), rel=1e-6, abs=1e-12)
    own = estimate.predict_workload(db, estimate.workload_layers(db, "tiny_llama", 2, "decode64", RUN), db_dir)
    assert own.overhead_from == "own trace" and own.overhead_s == pytest.approx(points[x1])
    # a second model whose traced steps cost twice as much: one slope for both (the mean of their two slopes, as
    # their steps share cache sizes), each model its own intercept (its mean overhead at the mean cache size)
    import pandas as pd

    twin = {**db, "layers": pd.concat([db["layers"], db["layers"].assign(model="twin")], ignore_index=True),
            "overheads": pd.concat([db["overheads"], ov.assign(model="twin", overhead_s=2 * ov["overhead_s"])],
                                   ignore_index=True)}
    used, _ = estimate.conditions(db["measurements"])
    slope, mid = 1.5 * rise, (x0 + x1) / 2
    for name, scale in (("tiny_llama", 1), ("twin", 2)):
        got = overhead_sources.decode_overhead(twin, used, target.assign(model=name), "decode256")
        assert got == pytest.approx(max(scale * (y0 + y1) / 2 + slope * (x - mid), 0.0), rel=1e-6, abs=1e-12)


def test_cli_predicts_a_decode_step(decode_run):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "opcost.cli", "predict", "tiny_llama", "--config", str(DECODE_CONFIG), "--mode",
           "decode", "--context", "64", "--batch", "2", "--db", str(decode_run / "results" / "db")]
    out = subprocess.run(cmd + ["--json"], capture_output=True, text=True, check=True).stdout
    step = json.loads(out)
    assert step["context"] == 64 and step["mode"] == "decode64" and step["measured_step_s"] > 0
    assert step["estimated_share"] == 0  # every configuration of a measured workload is measured
    # the memory bound: the bytes a step reads over this host's read bandwidth at that size, and the share of it
    # the predicted and the measured step reach
    assert 0 < step["bound_s"] < step["step_s"] and step["bound_fraction"] == pytest.approx(
        step["bound_s"] / step["step_s"]) and step["measured_bound_fraction"] == pytest.approx(
        step["bound_s"] / step["measured_step_s"])
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "per step (per token)" in text and "tokens/s" in text and "key/value cache" in text
    assert "memory bound" in text
    at = cmd.index("--context")
    bad = subprocess.run(cmd[:at] + cmd[at + 2:], capture_output=True, text=True)  # no --context
    assert bad.returncode == 1 and bad.stderr.strip() == ("opcost: --mode decode: needs --context L: the tokens in "
                                                          "the key/value cache")


def test_the_figures_show_decode_steps_across_context_lengths(decode_run):
    """figures/decode.png: the measured contexts and 2x, 4x the largest, predicted with their intervals; the run's
    measured steps; beyond them, attention's share of the operator time grows with the context (its estimate grows,
    the Linears keep their measured costs)."""
    from opcost.analysis.decode_curves import curves
    from opcost.database import read_db

    assert (decode_run / "results" / "figures" / "decode.png").stat().st_size > 10_000
    db_dir = decode_run / "results" / "db"
    c = curves(read_db(db_dir), db_dir, {"tiny_llama": RUN}).set_index("context")
    assert list(c.index) == [16, 64, 128, 256] and (c["model"] == "tiny_llama").all() and (c["batch"] == 2).all()
    assert c["measured"].tolist() == [True, True, False, False]
    assert (c.loc[[16, 64], "measured_s"] > 0).all() and c.loc[[128, 256], "measured_s"].isna().all()
    assert ((c["low_s"] <= c["predicted_s"]) & (c["predicted_s"] <= c["high_s"]) & (c["low_s"] > 0)).all()
    assert (c.loc[[16, 64], "estimated_share"] == 0).all() and (c.loc[[128, 256], "estimated_share"] > 0).all()
    assert 0 < c.loc[16, "attention_share"] < 1
    assert 0 < c.loc[128, "attention_share"] < c.loc[256, "attention_share"] < 1


def test_the_decode_overheads_slope_is_held_at_zero_or_above_in_the_fit_itself():
    """Two noisy traced steps whose overhead fell as the cache grew: an unconstrained least-squares line would fall
    further at a longer context (and be floored at 0 only after); the constrained fit is flat at each model's mean,
    so a longer context never costs less. A rising pair keeps its own line."""
    from opcost.analysis.overhead_sources import cache_line

    falling = [("m", 1e6, 3e-4), ("m", 4e6, 2e-4), ("n", 1e6, 5e-4), ("n", 4e6, 4.5e-4)]
    names = ["m", "n"]
    for model, mean in (("m", 2.5e-4), ("n", 4.75e-4)):
        line = cache_line(falling, names, model)
        assert [line(x) for x in (1e6, 4e6, 64e6)] == pytest.approx([mean] * 3, rel=1e-6)
    rising = [("m", 1e6, 2e-4), ("m", 3e6, 4e-4)]
    line = cache_line(rising, ["m"], "m")
    assert line(5e6) == pytest.approx(6e-4, rel=1e-6) and line(1e6) < line(3e6) < line(5e6)


# generate(): a prefill (mode prefill<P>) and its decode steps, predicted as Hugging Face runs them

LM = {"model": "hf:LlamaForCausalLM", "kwargs": KWARGS}


def test_a_prefill_is_generates_first_call():
    """prefill<P>: P tokens per sequence into an empty cache, the language-model head on the last token alone
    (generate() asks for logits_to_keep=1); its token is the one generate() picks first."""
    from opcost.measure.generation import run_generate
    from opcost.model.modes import prefill_length, prefill_mode

    assert prefill_mode(16) == "prefill16" and prefill_length("prefill16") == 16 and op_mode("prefill16") == "inference"
    assert prefill_length("decode16") is None and not is_decode("prefill16")
    wl = make_workload(load_model("lm", LM), BATCH, "prefill16")
    ids, mask = wl.inputs
    assert tuple(ids.shape) == (BATCH, 16) and mask.eq(1).all() and wl.carried() == []
    with wl.grad_context():
        logits = wl.forward().logits
    assert tuple(logits.shape) == (BATCH, 1, 128)
    first = run_generate(wl.model.module.model, ids, 1)[:, -1]
    assert torch.equal(first, logits[:, -1].argmax(-1))
    head = extract(wl)
    lm_head = [json.loads(s)[0]["T"] for s, p in zip(head["inputs"], head["params"])
               if '"out_features":128' in p]
    assert lm_head == [[BATCH, 1, 32]]


def test_generate_makes_exactly_the_tokens_asked_even_with_a_config_end_of_text_beyond_the_vocabulary():
    from opcost.measure.generation import run_generate

    gpt2 = load_model("g", {"model": "hf:GPT2LMHeadModel", "kwargs": {"n_layer": 1, "n_embd": 32, "n_head": 4,
                                                                      "vocab_size": 128}}).module.model
    calls = []  # generate()'s default cache, though opcost builds models with use_cache off: one token per step
    gpt2.register_forward_pre_hook(lambda m, a, k: calls.append((k["input_ids"].shape[1], type(k.get("cache")))),
                                   with_kwargs=True)
    out = run_generate(gpt2, torch.randint(0, 128, (2, 5)), 7)
    assert tuple(out.shape) == (2, 12)
    assert [n for n, _ in calls] == [5] + [1] * 6 and {c.__name__ for _, c in calls} == {"DynamicCache"}


def test_generates_own_loop_is_measured_on_a_one_layer_stand_in():
    from opcost.analysis.generate import stand_in
    from opcost.measure.generation import loop_overhead

    small = stand_in("lm", {**LM, "kwargs": {**KWARGS, "num_hidden_layers": 3}})
    assert type(small).__name__ == "LlamaForCausalLM" and small.config.num_hidden_layers == 1
    assert len(small.model.layers) == 1 and small.config.hidden_size == 32 and small.config.vocab_size == 128
    loop = loop_overhead(small, 1, 8, 5, rounds=3)
    assert 0 <= loop.per_step_low_s <= loop.per_step_s <= loop.per_step_high_s
    assert 0 <= loop.setup_low_s <= loop.setup_s <= loop.setup_high_s and loop.rounds == 3
    assert loop.setup_s + loop.per_step_s > 0  # generate() does work of its own around the forwards


def test_a_step_whose_working_set_outgrows_the_measured_steps_level_pays_the_slower_level(decode_run, tmp_path,
                                                                                          monkeypatch):
    """A step at a context and batch never measured (b3 at 1,024) whose working set (weights, the cache read and
    the cache written) is larger than every measured step's: on a host whose read rate falls from 1e11 to 1e9
    bytes/s between the two sizes, each of its operators' bytes costs the difference of the two rates
    (Prediction.level_s), added to the prediction and above the interval's low end; on a host without that cliff,
    nothing; a measured step, nothing."""
    import time

    from opcost.analysis import estimate
    from opcost.analysis.decode import footprint
    from opcost.analysis.features import features
    from opcost.database import of_workload, read_db
    from opcost.measure import bandwidth

    db_dir = decode_run / "results" / "db"
    db = read_db(db_dir)
    steps = db["e2e"][db["e2e"]["model"] == "tiny_llama"][["batch", "mode"]].drop_duplicates()
    held = max(footprint(of_workload(db["layers"], "tiny_llama", int(b), m), int(m[len("decode"):]))
               for b, m in zip(steps["batch"], steps["mode"]) if m.startswith("decode"))
    target = estimate.workload_layers(db, "tiny_llama", 3, "decode1024", RUN)
    step = footprint(target, 1024)
    assert step > 4 * held
    _, picked = estimate.conditions(db["measurements"])
    monkeypatch.setenv("OPCOST_CACHE", str(tmp_path))
    kept = bandwidth.kept_path(str(picked["host"]), str(picked["device"]), picked["threads"])

    def on(rates):
        kept.write_text(json.dumps({"bytes": [held / 2, held * 1.01, step * 0.99, step * 2], "bytes_per_s": rates,
                                    "measured_at": time.time()}))
        return estimate.predict_workload(db, target, db_dir)

    flat, cliff = on([1e11] * 4), on([1e11, 1e11, 1e9, 1e9])
    assert flat.level_s == 0 and cliff.level_s > 0
    rows = cliff.layers
    nbytes = features(rows)["bytes"].astype(float) * rows["count"].astype(float)
    small = features(rows)["bytes"].astype(float) <= held
    assert cliff.level_s >= float(nbytes[small].sum()) * (1e-9 - 1e-11) * (1 - 1e-9)
    assert cliff.level_s <= float(nbytes.sum()) * 1e-9 * (1 + 1e-9)
    assert cliff.predicted_s == pytest.approx(flat.predicted_s + cliff.level_s, rel=1e-9)
    assert cliff.low_s == pytest.approx(flat.low_s, rel=1e-9) and cliff.high_s > flat.high_s
    measured = estimate.predict_workload(db, estimate.workload_layers(db, "tiny_llama", 2, "decode64", RUN), db_dir)
    assert measured.level_s == 0


def test_the_hosts_read_bandwidth_by_working_set_size(tmp_path, monkeypatch):
    from opcost.measure import bandwidth

    monkeypatch.setenv("OPCOST_CACHE", str(tmp_path))
    c = bandwidth.measure(sizes=(2 ** 15, 2 ** 20, 2 ** 22))
    assert c["bytes"] == [2 ** 15, 2 ** 20, 2 ** 22] and all(r > 1e8 for r in c["bytes_per_s"])
    assert bandwidth.at(c, 2 ** 20) == pytest.approx(c["bytes_per_s"][1])
    assert bandwidth.at(c, 1) == c["bytes_per_s"][0] and bandwidth.at(c, 2 ** 40) == c["bytes_per_s"][-1]
    kept = bandwidth.curve("h", "cpu", 1)
    assert bandwidth.curve("h", "cpu", 1)["measured_at"] == kept["measured_at"]  # kept, not measured again
    assert list(tmp_path.glob("bandwidth-h-cpu-t1.json"))


def _generate(decode_run, prompt, new, batch=2, **kw):
    from opcost.analysis import generate
    from opcost.database import read_db
    from opcost.measure.generation import LoopOverhead

    db_dir = decode_run / "results" / "db"
    loop = kw.pop("loop", LoopOverhead(1e-3, 1e-4, 5e-5, 2e-4, 5e-4, 2e-3, 3))
    curve = {"bytes": [2 ** 15, 2 ** 30], "bytes_per_s": [1e11, 1e10]}
    return generate.predict(read_db(db_dir), generate.Question("tiny_llama", batch, prompt, new), RUN, db_dir,
                            trace_now=False, loop=loop, bandwidth=curve, **kw)


def test_generate_is_its_prefill_and_each_step_at_its_own_context(decode_run):
    g = _generate(decode_run, 16, 100)
    contexts = [s["context"] for s in g["steps"]]
    assert contexts[0] == 16 and contexts[-1] == 16 + 100 - 2 and 64 in contexts and len(contexts) >= 5
    loop = g["loop"]
    assert g["ttft_s"] == pytest.approx(g["prefill_s"] + loop["setup_s"])
    assert g["prefill_measured_s"] > 0 and g["prefill_estimated_share"] == 0  # prefill16 was measured
    assert g["total_s"] == pytest.approx(g["ttft_s"] + g["decode_s"])
    assert g["tpot_s"] * 99 == pytest.approx(g["decode_s"])
    steps = sum(s["step_s"] for s in g["steps"])
    assert g["decode_s"] > steps  # every step, not only those predicted, and the loop's share of each
    assert g["tokens_per_s"] == pytest.approx(2 * 100 / g["total_s"])
    assert g["total_low_s"] < g["total_s"] < g["total_high_s"] and g["ttft_low_s"] < g["ttft_s"] < g["ttft_high_s"]
    assert 0 < g["estimated_share"] < 1  # the steps beyond context 64 are estimated
    # the bound: weights once and the cache, over the bandwidth at that size; the cache grows with the context
    assert g["steps"][-1]["kv_cache_bytes"] > g["steps"][0]["kv_cache_bytes"] > 0
    assert 0 < g["decode_bound_s"] < g["decode_operators_s"] and 0 < g["bound_fraction"] < 1


def test_a_longer_generation_never_takes_less_time(decode_run):
    totals = [_generate(decode_run, 16, n)["total_s"] for n in (1, 2, 8, 40, 160)]
    assert totals == sorted(totals) and len(set(totals)) == 5, totals
    one = _generate(decode_run, 16, 1)
    assert one["steps"] == [] and one["tpot_s"] is None and one["total_s"] == pytest.approx(one["ttft_s"])


def test_a_prefill_at_a_prompt_never_traced_takes_the_glue_of_its_models_traced_prefills(decode_run):
    """Per call, the median of the model's prefills traced at other prompt lengths (16 and 64), never nothing: a
    prefill's Python glue is that of the same calls at another length."""
    import numpy as np

    from opcost.analysis import estimate
    from opcost.database import read_db

    db_dir = decode_run / "results" / "db"
    db = read_db(db_dir)
    layers = estimate.workload_layers(db, "tiny_llama", 2, "prefill40", RUN)
    p = estimate.predict_workload(db, layers, db_dir)
    ov = db["overheads"][(db["overheads"]["model"] == "tiny_llama") & db["overheads"]["mode"].str.startswith("prefill")]
    assert sorted(ov["mode"]) == ["prefill16", "prefill64"]
    per_call = float(np.median(ov["overhead_s"] / ov["calls"]))
    assert p.overhead_from == "same model" and p.overhead_s == pytest.approx(per_call * layers["count"].sum())


def test_the_workflow_validates_generate_against_hugging_face_generate(decode_run):
    import pandas as pd

    results = decode_run / "results"
    g = pd.read_parquet(results / "validation" / "generate.parquet")
    assert len(g) == 1 and (g["prompt"].iloc[0], g["new"].iloc[0], g["batch"].iloc[0]) == (24, 6, 2)
    r = g.iloc[0]
    assert r["measured_s"] > r["measured_ttft_s"] > 0 and r["low_s"] < r["predicted_s"] < r["high_s"]
    assert r["control"] == "tiny_llama/decode64/b2" and r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"]
                                                                                    - 1)
    assert "Hugging Face generate()" in (results / "summary.txt").read_text()
    assert (results / "figures" / "generate.png").stat().st_size > 10_000


def test_cli_predicts_generate(decode_run):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "opcost.cli", "predict", "tiny_llama", "--config", str(DECODE_CONFIG), "--mode",
           "generate", "--prompt", "24", "--new", "6", "--batch", "2", "--db", str(decode_run / "results" / "db"),
           "--no-trace"]
    g = json.loads(subprocess.run(cmd + ["--json"], capture_output=True, text=True, check=True).stdout)
    assert (g["prompt"], g["new"], g["batch"], g["mode"]) == (24, 6, 2, "generate")
    assert [s["context"] for s in g["steps"]] == [24, 25, 26, 27, 28]
    assert g["loop"]["rounds"] > 0 and g["bandwidth"]["bytes"]  # measured on this host now
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "time to first token" in text and "time per output token" in text and "memory bound" in text
    for drop, line in ((("--new", "6"), "opcost: --mode generate: needs --new N: the tokens generated per sequence"),
                       (("--prompt", "24"), "opcost: --mode generate: needs --prompt P: the prompt's tokens per "
                                            "sequence")):
        at = cmd.index(drop[0])
        bad = subprocess.run(cmd[:at] + cmd[at + 2:], capture_output=True, text=True)
        assert bad.returncode == 1 and bad.stderr.strip() == line
    base = {"models": {"tiny_llama": {**RUN, "model": "hf:llama"}}}
    cfg = decode_run / "base.yaml"
    cfg.write_text(yaml.safe_dump(base, sort_keys=False))
    at = cmd.index("--config")
    bad = subprocess.run(cmd[:at + 1] + [str(cfg)] + cmd[at + 2:], capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.strip() == (
        "opcost: model tiny_llama: hf:llama builds LlamaModel, which has no language-model head to generate() with: "
        "name its causal-LM class (e.g. hf:LlamaForCausalLM, hf:GPT2LMHeadModel)")
