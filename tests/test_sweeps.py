"""Operator sweeps: points expand into model entries that are profiled like a model's operators."""
import json

import pandas as pd
import pytest
import torch

from opcost import config as cfgmod
from opcost.errors import OpcostError
from opcost.model.extract import extract
from opcost.model.sources import load_model
from opcost.model.sweep_points import model_entries, points
from opcost.model.sweeps import chain
from opcost.model.workload import make_workload


def test_a_sweep_expands_into_chain_models_left_out_of_validation_workloads():
    cfg = cfgmod.validate({"models": {"mlp": {}}, "batch_sizes": [1, 4], "sweeps": [
        {"op": "Conv2d", "grid": {"channels": [8, 12], "kernel": [1, 3], "groups": [1, 4]}, "depth": 3},
        {"op": "Linear", "grid": {"features": [16, 32, 64], "batch": [2]}, "samples": 2},
    ]})
    names = [n for n in cfg["models"] if n.startswith("sweep-")]
    assert len(names) == 8 + 2  # 2 x 2 x 2 Conv2d points (4 divides 8 and 12), 2 of 3 Linear points
    conv = cfg["models"]["sweep-Conv2d-c12-g4-k3"]
    assert conv["input_shapes"] == [[12, 28, 28]] and conv["batch_sizes"] == [1, 4]
    assert conv["kwargs"] == {"op": "Conv2d", "depth": 3, "channels": 12, "groups": 4, "kernel": 3}
    assert all(cfg["models"][n]["batch_sizes"] == [2] for n in names if "Linear" in n)
    assert cfgmod.workloads(cfg) == [("mlp", "inference", 1), ("mlp", "inference", 4)]
    assert len(cfgmod.workloads(cfg, "sweeps")) == 8 * 2 + 2
    assert cfgmod.validate(cfg) == cfg  # idempotent: a validated config validates unchanged
    assert points({"op": "Linear", "grid": {"features": [1, 2, 3, 4]}, "samples": 2}) == \
        points({"op": "Linear", "grid": {"features": [1, 2, 3, 4]}, "samples": 2})  # seeded


def test_chain_layers_keep_their_shape_and_extract_as_one_configuration():
    cfg = cfgmod.validate({"models": {"x": {}}, "batch_sizes": [2], "sweeps": [
        {"op": "Conv2d", "grid": {"channels": [4], "size": [6]}, "depth": 3},
        {"op": "attention", "grid": {"seq": [5], "heads": [2], "head_dim": [4]}, "depth": 2},
        {"op": "mlp", "grid": {"features": [6], "rows": [5], "ratio": [3]}, "depth": 2},
        {"op": "cat", "grid": {"channels": [6], "size": [4], "parts": [3]}, "depth": 2}]})
    for name in ("sweep-Conv2d-c4-h6", "sweep-attention-d4-n2-l5"):
        layers = extract(make_workload(load_model(name, cfg["models"][name]), 2, "inference"))
        main = layers[layers["op_type"].isin(["Conv2d", "scaled_dot_product_attention"])]
        assert len(main) == 1, layers[["op_type", "count"]]
        assert int(main["count"].iloc[0]) == (3 if "Conv2d" in name else 2)
    q, k, v = json.loads(main["inputs"].iloc[0])[:3]  # the attention point's: slices of a packed qkv, as in a ViT
    assert q["T"] == k["T"] == v["T"] == [2, 2, 5, 4] and q["stride"] == [120, 4, 24, 1]
    # mlp: a feed-forward block per layer, Linear 6 -> 18 and 18 -> 6 called twice each
    assert chain("mlp", depth=2, features=6, ratio=3)(torch.zeros(2, 5, 6)).shape == (2, 5, 6)
    name = "sweep-mlp-f6-x3-r5"
    lin = extract(make_workload(load_model(name, cfg["models"][name]), 2, "inference"))
    lin = lin[lin["op_type"] == "Linear"]
    assert sorted(json.loads(p)["out_features"] for p in lin["params"]) == [6, 18] and set(lin["count"]) == {2}
    # cat: a branching block's channel concat, its inputs the parts of the producer's output
    name = "sweep-cat-c6-p3-h4"
    cat = extract(make_workload(load_model(name, cfg["models"][name]), 2, "inference"))
    cat = cat[cat["op_type"] == "cat"]
    assert len(cat) == 1 and int(cat["count"].iloc[0]) == 2
    assert [t["T"] for t in json.loads(cat["inputs"].iloc[0])] == [[2, 2, 4, 4]] * 3
    # Conv2d with a ratio: pairs that widen to ratio x channels and narrow back, each conv a configuration
    name = "sweep-Conv2d-c4-k1-x3-h6"
    cfg = cfgmod.validate({"models": {"x": {}}, "batch_sizes": [2], "sweeps": [
        {"op": "Conv2d", "points": [{"channels": 4, "size": 6, "kernel": 1, "ratio": 3}], "depth": 2}]})
    conv = extract(make_workload(load_model(name, cfg["models"][name]), 2, "inference"))
    conv = conv[conv["op_type"] == "Conv2d"]
    assert sorted((json.loads(p)["in_channels"], json.loads(p)["out_channels"]) for p in conv["params"]) == \
        [(4, 12), (12, 4)] and set(conv["count"]) == {2}
    for op in ("Conv2d", "MaxPool2d"):  # a strided layer changes the shape: a chain of one
        strided = chain(op, depth=4, channels=4, stride=2)
        assert len(strided) == 1 and strided(torch.zeros(1, 4, 8, 8)).shape == (1, 4, 4, 4)
    assert model_entries([], [1], ["inference"]) == {}


def test_activation_pooling_and_squeeze_excitation_points_record_the_module_types_cnns_run():
    """The activations of MobileNets and EfficientNets, a global average pool, and torchvision's squeeze-and-
    excitation block (pool, two 1x1 convolutions on one value per channel, an activation, a gate, the input times the
    gate): each point extracts as the op types those models record, at the point's sizes."""
    sweeps = [{"op": op, "grid": {"channels": [8], "size": [6]}, "depth": 2}
              for op in ("SiLU", "Hardswish", "Sigmoid", "Hardsigmoid", "AdaptiveAvgPool2d")]
    sweeps += [{"op": "se", "grid": {"channels": [16], "size": [5], "act": [0, 1]}, "depth": 1}]
    cfg = cfgmod.validate({"models": {"x": {}}, "batch_sizes": [2], "sweeps": sweeps})
    for op in ("SiLU", "Hardswish", "Sigmoid", "Hardsigmoid"):
        layers = extract(make_workload(load_model(f"sweep-{op}-c8-h6", cfg["models"][f"sweep-{op}-c8-h6"]), 2,
                                       "inference"))
        assert list(layers["op_type"]) == [op] and int(layers["count"].iloc[0]) == 2
        assert json.loads(layers["inputs"].iloc[0])[0]["T"] == [2, 8, 6, 6]
    pool = extract(make_workload(load_model("sweep-AdaptiveAvgPool2d-c8-h6",
                                            cfg["models"]["sweep-AdaptiveAvgPool2d-c8-h6"]), 2, "inference"))
    assert list(pool["op_type"]) == ["AdaptiveAvgPool2d"] and int(pool["count"].iloc[0]) == 1  # a chain of one
    assert json.loads(pool["outputs"].iloc[0])[0]["T"] == [2, 8, 1, 1]
    for act, (inner, gate) in enumerate((("ReLU", "Hardsigmoid"), ("SiLU", "Sigmoid"))):
        name = f"sweep-se-a{act}-c16-h5"
        layers = extract(make_workload(load_model(name, cfg["models"][name]), 2, "inference"))
        assert set(layers["op_type"]) == {"AdaptiveAvgPool2d", "Conv2d", inner, gate, "mul"}
        squeeze = {json.loads(p)["out_channels"] for p in layers.loc[layers["op_type"] == "Conv2d", "params"]}
        assert squeeze == {4, 16}  # 16 / squeeze 4, and back
    with pytest.raises(OpcostError, match="unknown parameter"):
        cfgmod.validate({"models": {"x": {}}, "sweeps": [{"op": "SiLU", "points": [{"features": 8}]}]})


def test_an_evicting_point_ends_each_iteration_by_writing_twice_the_last_level_cache(tmp_path):
    """A sweep with ``evict``: its points are named apart, their chain ends with one SweepEvict call per iteration
    (its own configuration, profiled with the others), which writes a buffer of twice the host's last-level cache
    and passes its input on; the chain's layers are the same configurations as without it."""
    from opcost.database import catalog
    from opcost.measure.hostinfo import llc_bytes
    from opcost.measure.profile import ProfileSettings, profile_configs
    from opcost.measure.timing import TimingSettings
    from opcost.model.sweeps import SweepEvict

    cfg = cfgmod.validate({"models": {"x": {}}, "batch_sizes": [2], "sweeps": [
        {"op": "Linear", "grid": {"features": [8], "rows": [3]}, "evict": True},
        {"op": "Linear", "grid": {"features": [8], "rows": [3]}},
        {"op": "LayerNorm", "grid": {"features": [8], "rows": [3]}, "evict": True}]})
    assert {"sweep-Linear-f8-r3-evict", "sweep-Linear-f8-r3"} <= set(cfg["models"])
    # two points of one output shape: each its own eviction configuration, in its own workload's rotation
    evicts = [extract(make_workload(load_model(n, cfg["models"][n]), 2, "inference")).query("op_type == 'SweepEvict'")
              for n in ("sweep-Linear-f8-r3-evict", "sweep-LayerNorm-f8-r3-evict")]
    assert len({e["config_id"].iloc[0] for e in evicts}) == 2
    evicting = load_model("sweep-Linear-f8-r3-evict", cfg["models"]["sweep-Linear-f8-r3-evict"])
    (ev,) = [m for m in evicting.module.modules() if isinstance(m, SweepEvict)]
    assert ev.traffic.numel() * 4 == 2 * (llc_bytes() or 32 * 1024 * 1024)
    x = torch.ones(2, 3, 8)
    assert ev(x) is x and bool((ev.traffic == 1.0).all())
    layers = extract(make_workload(evicting, 2, "inference"))
    plain = extract(make_workload(load_model("sweep-Linear-f8-r3", cfg["models"]["sweep-Linear-f8-r3"]), 2,
                                  "inference"))
    assert dict(zip(layers["op_type"], layers["count"])) == {"Linear": 4, "SweepEvict": 1}
    assert set(layers.loc[layers["op_type"] == "Linear", "config_id"]) == set(plain["config_id"])
    iso, _ = profile_configs(catalog(layers), cfg["models"], "cpu", "float32",
                             ProfileSettings(TimingSettings(max_seconds=0.05, min_samples=3), remeasure=0),
                             on_e2e=lambda *_: None)
    assert set(iso["status"]) == {"ok"} and set(iso["op_type"]) == {"Linear", "SweepEvict"}
    assert set(iso["attempts"]) == {2}  # sweep points: two visits of their rotation (`profile.visits`)


def test_a_channels_last_point_is_profiled_in_nhwc_as_a_channels_last_model_runs():
    """ConvNeXt's convolutions read channels-last tensors (its LayerNorm leaves them so), and PVT-v2's a channels-last
    view of its tokens with weights in NCHW order, which the CPU kernels run at other speeds: a point with
    ``channels_last`` 1 (input and weights) or 2 (the input alone) is a distinct configuration whose input has NHWC
    strides and whose layout the cost model keeps apart; any other value is refused."""
    from opcost.analysis.features import features

    cfg = cfgmod.validate({"models": {"x": {}}, "batch_sizes": [2], "sweeps": [
        {"op": "Conv2d", "grid": {"channels": [4], "size": [6], "kernel": [1], "channels_last": [0, 1, 2]},
         "depth": 2}]})
    entries = [cfg["models"][f"sweep-Conv2d-c4-nhwc{v}-k1-h6"] for v in (0, 1, 2)]
    assert [e.get("memory_format") for e in entries] == [None, "channels_last", "token_major"]
    convs = []
    for entry in entries:
        layers = extract(make_workload(load_model("p", entry), 2, "inference"))
        assert set(layers["op_type"]) == {"Conv2d"}  # reading the weights' order records no call of its own
        convs.append(layers[layers["op_type"] == "Conv2d"].iloc[0])
    strides = [json.loads(c["inputs"])[0]["stride"] for c in convs]
    assert strides == [[144, 36, 6, 1], [144, 1, 24, 4], [144, 1, 24, 4]]  # [2, 4, 6, 6]: NCHW, then NHWC twice
    assert [json.loads(c["params"]).get("weight_format") for c in convs] == [None, "channels_last", None]
    assert list(features(pd.DataFrame(convs))["layout"]) == ["", "nhwc", "nhwc"]  # a batch of 2: channels last
    one = extract(make_workload(load_model("p", entries[2]), 1, "inference"))  # one sample: neither order
    assert json.loads(one["inputs"].iloc[0])[0]["stride"] == [4, 1, 24, 4]
    assert list(features(one)["layout"]) == ["strided", ""]  # the chain's first layer; the next reads NCHW
    assert len({c["config_id"] for c in convs}) == 3
    with pytest.raises(OpcostError, match="channels_last 3"):
        model_entries([{"op": "Conv2d", "points": [{"channels_last": 3}]}], [1], ["inference"])


def test_parameter_free_chains_back_propagate_in_training():
    """Inside a model a ReLU or a concat reads activations that require grad; a chain of them gets such an input
    in training (else the workload has nothing to back-propagate and the point is lost)."""
    cfg = cfgmod.validate({"models": {"x": {}}, "batch_sizes": [2], "modes": ["training"], "sweeps": [
        {"op": "ReLU", "grid": {"channels": [4], "size": [4]}, "depth": 2},
        {"op": "cat", "grid": {"channels": [4], "size": [4]}, "depth": 2}]})
    for name, op, node in (("sweep-ReLU-c4-h4", "ReLU", "ReluBackward0"), ("sweep-cat-c4-h4", "cat", "CatBackward0")):
        layers = extract(make_workload(load_model(name, cfg["models"][name]), 2, "training"))
        row = layers[layers["op_type"] == op]
        assert len(row) == 1 and json.loads(row["backward"].iloc[0]) == {node: 2}
    with torch.inference_mode():  # inference leaves the input as it is
        x = torch.zeros(1, 4, 4, 4)
        chain("ReLU", depth=2, channels=4, size=4).eval()(x)
        assert not x.requires_grad


def test_dropout_and_embedding_points_extract_with_their_backward_in_training():
    """A Dropout point keeps its probability (a float, in its name); an Embedding or EmbeddingBag point looks up
    token ids below its table's size, and in training back-propagates into the table."""
    cfg = cfgmod.validate({"models": {"x": {}}, "batch_sizes": [2], "modes": ["training"], "sweeps": [
        {"op": "Dropout", "grid": {"channels": [4], "size": [4], "p": [0.25]}, "depth": 2},
        {"op": "Embedding", "points": [{"num": 50, "dim": 8, "rows": 6}]}]})
    assert cfg["models"]["sweep-Embedding-e8-v50-r6"]["input_range"] == [0, 50]
    for name, op, node in (("sweep-Dropout-c4-p0.25-h4", "Dropout", "MulBackward0"),
                           ("sweep-Embedding-e8-v50-r6", "Embedding", "EmbeddingBackward0")):
        layers = extract(make_workload(load_model(name, cfg["models"][name]), 2, "training"))
        row = layers[layers["op_type"] == op]
        assert len(row) == 1 and node in json.loads(row["backward"].iloc[0]), layers[["op_type", "backward"]]
    (ids,) = json.loads(row["inputs"].iloc[0])
    assert ids["T"] == [2, 6] and ids["dtype"] == "int64"
    assert json.loads(layers[layers["op_type"] == "Embedding"]["params"].iloc[0])["num_embeddings"] == 50
    # an EmbeddingBag point: flat ids and bag offsets into the leaf module, as DLRM calls it; the table's gradient
    bags = "sweep-EmbeddingBag-e8-v50-r3"
    cfg = cfgmod.validate({"models": {"x": {}}, "batch_sizes": [2], "modes": ["training"], "sweeps": [
        {"op": "EmbeddingBag", "points": [{"num": 50, "dim": 8, "rows": 3}], "depth": 3}]})
    assert cfg["models"][bags]["input_range"] == [0, 50]
    layers = extract(make_workload(load_model(bags, cfg["models"][bags]), 2, "training"))
    row = layers[layers["op_type"] == "EmbeddingBag"]  # three tables of one configuration, looked up in turn
    assert len(row) == 1 and row["count"].iloc[0] == 3
    assert "EmbeddingBagBackward0" in json.loads(row["backward"].iloc[0])
    assert json.loads(layers[layers["op_type"] == "stack"]["outputs"].iloc[0])[0]["T"] == [2, 3, 8]
    ids, offsets = json.loads(row["inputs"].iloc[0])
    assert ids["T"] == [6] and offsets["T"] == [2] and ids["dtype"] == offsets["dtype"] == "int64"
    assert json.loads(row["outputs"].iloc[0])[0]["T"] == [2, 8]
    with pytest.raises(OpcostError, match="1.5"):  # a probability of 1 or more is refused
        cfgmod.validate({"models": {"x": {}}, "sweeps": [{"op": "Dropout", "grid": {"p": [1.5]}}]})


def test_listed_points_are_taken_as_they_are_and_a_misspelt_parameter_is_named():
    listed = [{"channels": 16, "kernel": 3, "batch": 2}, {"channels": 32, "kernel": 1, "batch": 4}]
    entries = model_entries([{"op": "Conv2d", "points": listed}], [1], ["inference"])
    assert sorted(entries) == ["sweep-Conv2d-c16-k3", "sweep-Conv2d-c32-k1"]
    assert entries["sweep-Conv2d-c16-k3"]["batch_sizes"] == [2]
    with pytest.raises(OpcostError, match="sweeps: Conv2d.*unknown parameter.*chanels"):
        model_entries([{"op": "Conv2d", "grid": {"chanels": [16]}}], [1], ["inference"])


def test_suggested_points_are_where_the_cost_model_is_least_certain():
    """Fitted on Linear layers up to 128 features whose cost departs from the roofline as they grow, the cost
    model expects larger errors farther from what it measured: the 1024- and 2048-feature candidates are less
    certain and chosen first, and after the 2048 point the next is the 1024 one, not a neighbour of the first."""
    import math

    import numpy as np
    import pandas as pd

    from opcost.analysis.costmodel import CostModel
    from opcost.analysis.features import configuration_features
    from opcost.analysis.sampling import candidate_layers, choose

    rng = np.random.default_rng(0)
    rows = []
    for i in range(80):
        m, k = int(rng.integers(1, 64)), int(rng.integers(8, 128))
        spec = lambda n: [{"T": [m, n], "dtype": "float32"}]  # noqa: E731
        f = configuration_features("Linear", {"in_features": k, "out_features": k}, spec(k), spec(k))
        quirk = math.exp(rng.normal(0, 0.05) + 0.4 * math.sin(k / 9))  # shape effects no feature explains
        rows.append({"config_id": f"c{i}", "op_type": "Linear", "mode": "inference", "phase": "forward",
                     "params": json.dumps({"in_features": k, "out_features": k}), "inputs": json.dumps(spec(k)),
                     "outputs": json.dumps(spec(k)), "seconds": (3e-6 + max(f["flops"] / 2e10, f["bytes"] / 4e9))
                     * quirk})
    model = CostModel.fit(pd.DataFrame(rows))
    cands = candidate_layers({"op": "Linear", "grid": {"features": [32, 64, 1024, 1536, 2048], "rows": [16]}},
                             [1], "inference")
    point = {f: json.dumps({"batch": 1, "features": f, "rows": 16}) for f in (32, 64, 1024, 1536, 2048)}
    assert sorted(cands["point"].unique()) == sorted(point.values())
    lin = cands[cands["op_type"] == "Linear"].assign(phase="forward").set_index("point")
    doubt = dict(zip(lin.index, model.uncertainty(lin)))
    assert model.error_growth[1] > 0 and doubt[point[2048]] > doubt[point[1024]] > doubt[point[64]]
    assert choose(model, cands, 2) == [point[2048], point[1024]]
    assert len(choose(model, cands, 9)) == 5 and choose(model, cands, 0) == []


def _ops(layers, scope=None):
    rows = layers if scope is None else layers[layers["scope"] == scope]
    return set(rows["op_type"])


def test_transformer_sweeps_compute_and_record_what_hugging_face_decoders_do():
    """The sweeps' RMSNorm, rotary embeddings, tanh GELU and gated MLP compute what transformers' Llama and GPT-2
    classes compute, and their points record the op types a tiny Llama records: SDPA called with ``enable_gqa``
    and ``is_causal`` at fewer key/value heads, the rotary aten ops, the gated MLP's Linears, SiLU and mul."""
    transformers = pytest.importorskip("transformers")
    from transformers.activations import NewGELUActivation
    from transformers.models.llama import modeling_llama as ml

    from opcost.analysis import optypes
    from opcost.model.sweeps import SweepRMSNorm, SweepRotaryEmbedding, TanhGELU

    torch.manual_seed(0)
    x = torch.randn(2, 16, 32)
    assert torch.allclose(SweepRMSNorm(32)(x), ml.LlamaRMSNorm(32)(x))
    assert torch.allclose(TanhGELU()(x), NewGELUActivation()(x))
    config = transformers.LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                      intermediate_size=48, num_hidden_layers=1, vocab_size=100)
    positions = torch.arange(16).unsqueeze(0).expand(2, -1)
    cos, sin = SweepRotaryEmbedding(8)(x, positions)
    ref_cos, ref_sin = ml.LlamaRotaryEmbedding(config)(x, positions)
    assert torch.allclose(cos, ref_cos) and torch.allclose(sin, ref_sin)
    rotary = chain("rotary", depth=1, seq=16, heads=4, head_dim=8)
    q = x.view(2, 16, 4, 8).transpose(1, 2)
    assert torch.allclose(rotary(x), ml.apply_rotary_pos_emb(q, q, ref_cos, ref_sin)[0], atol=1e-6)

    cfg = cfgmod.validate({"models": {"llama": {"model": "hf:llama", "seq_len": 16, "kwargs": {
        "num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 100}}}, "batch_sizes": [2], "sweeps": [
        {"op": "attention", "grid": {"seq": [16], "heads": [4], "head_dim": [8], "heads_kv": [2, 3], "causal": [1]},
         "depth": 2},
        {"op": "attention", "points": [{"seq": 16, "heads": 4, "head_dim": 8, "causal": 1}], "depth": 2},
        {"op": "rotary", "points": [{"seq": 16, "heads": 4, "head_dim": 8}], "depth": 2},
        {"op": "RMSNorm", "points": [{"features": 32, "rows": 16}]},
        {"op": "gated_mlp", "points": [{"features": 32, "rows": 16, "inter": 48}], "depth": 2},
        {"op": "lm_head", "points": [{"features": 32, "rows": 16, "vocab": 100}]}]})
    assert "sweep-attention-causal1-d8-n4-kv3-l16" not in cfg["models"]  # 3 key/value heads do not divide 4
    extracted = {name: extract(make_workload(load_model(name, entry), 2, "inference"))
                 for name, entry in cfg["models"].items()}
    model = extracted.pop("llama")

    def sdpa(layers):
        row = layers[layers["op_type"] == "scaled_dot_product_attention"].iloc[0]
        p = json.loads(row["params"])
        return [t["T"] for t in json.loads(row["inputs"])], p["args"][3:], sorted(p["kwargs"]["D"])

    assert sdpa(extracted["sweep-attention-causal1-d8-n4-kv2-l16"]) == sdpa(model) == (
        [[2, 4, 16, 8], [2, 2, 16, 8], [2, 2, 16, 8]], [None, 0.0, True], ["enable_gqa", "scale"])
    # every head causal, as GPT-2 calls it: no enable_gqa
    assert sdpa(extracted["sweep-attention-causal1-d8-n4-l16"]) == ([[2, 4, 16, 8]] * 3, [None, 0.0, True], ["scale"])
    assert int(extracted["sweep-attention-causal1-d8-n4-l16"].query(
        "op_type == 'scaled_dot_product_attention'")["count"].iloc[0]) == 2
    rot = extracted["sweep-rotary-d8-n4-l16"]
    assert {"mul", "slice", "neg", "cat", "add"} <= _ops(rot, "functional") & _ops(model, "functional")
    assert optypes.twins("LlamaRotaryEmbedding") == ("SweepRotaryEmbedding",) and "SweepRotaryEmbedding" in _ops(rot)
    neg = rot[rot["op_type"] == "neg"]
    assert [t["T"] for t in json.loads(neg["inputs"].iloc[0])] == [[2, 4, 16, 4]] and int(neg["count"].iloc[0]) == 2
    assert "SweepRMSNorm" in optypes.twins("LlamaRMSNorm") and _ops(extracted["sweep-RMSNorm-f32-r16"]) == \
        {"SweepRMSNorm"}
    mlp = extracted["sweep-gated_mlp-f32-i48-r16"]
    assert _ops(mlp) == {"Linear", "SiLU", "mul"} and "SiLU" in optypes.twins("SiLUActivation")
    assert {"Linear", "SiLUActivation", "mul"} <= _ops(model)
    lin = mlp[mlp["op_type"] == "Linear"]
    assert sorted(json.loads(p)["out_features"] for p in lin["params"]) == [32, 48] and \
        sorted(lin["count"]) == [2, 4]  # down once, gate and up (one configuration) twice per layer
    head = extracted["sweep-lm_head-f32-r16-vocab100"]
    assert [t["T"] for t in json.loads(head["outputs"].iloc[0])] == [[2, 16, 100]]
    assert json.loads(head["params"].iloc[0])["bias"] is False
    # in training the chain's attention dispatches the flash kernel, a twin of SDPA
    trained = extract(make_workload(load_model("sweep-attention-causal1-d8-n4-kv2-l16",
                                               cfg["models"]["sweep-attention-causal1-d8-n4-kv2-l16"]), 2, "training"))
    assert "_scaled_dot_product_flash_attention_for_cpu" in _ops(trained)


def test_a_block_point_measures_its_operator_after_a_convolution_as_inside_a_cnn():
    """A sweep with ``block``: its points are named apart and each chain layer is a CNN block around the operator,
    so that the operator follows the call it follows inside a CNN (a convolution, then a normalisation), and the
    operator's configurations are the plain chain's."""
    cfg = cfgmod.validate({"models": {"x": {}}, "batch_sizes": [2], "sweeps": [
        {"op": "SiLU", "grid": {"channels": [8], "size": [6]}, "block": True},
        {"op": "SiLU", "grid": {"channels": [8], "size": [6]}},
        {"op": "Conv2d", "grid": {"channels": [8], "size": [6], "kernel": [3]}, "block": True, "depth": 2},
        {"op": "AdaptiveAvgPool2d", "grid": {"channels": [8], "size": [6]}, "block": True}]})
    assert {"sweep-SiLU-c8-h6-block", "sweep-SiLU-c8-h6", "sweep-Conv2d-c8-k3-h6-block"} <= set(cfg["models"])

    def calls(name):
        layers = extract(make_workload(load_model(name, cfg["models"][name]), 2, "inference"))
        return layers, [t for t, n in zip(layers["op_type"], layers["count"]) for _ in range(int(n))]

    block, order = calls("sweep-SiLU-c8-h6-block")
    plain, _ = calls("sweep-SiLU-c8-h6")
    assert sorted(order) == sorted(["Conv2d", "BatchNorm2d", "SiLU"] * 4)
    assert set(block.loc[block["op_type"] == "SiLU", "config_id"]) == set(plain["config_id"])  # the same calls
    _, order = calls("sweep-Conv2d-c8-k3-h6-block")
    assert sorted(order) == sorted(["Conv2d", "BatchNorm2d", "ReLU"] * 2)
    _, order = calls("sweep-AdaptiveAvgPool2d-c8-h6-block")
    assert sorted(order) == ["AdaptiveAvgPool2d", "BatchNorm2d", "Conv2d", "ReLU"]  # a block of one
    model = chain("SiLU", depth=2, block=1, channels=8, size=6)
    kinds = [type(m).__name__ for m in model.modules() if not list(m.children())]
    assert kinds == ["Conv2d", "BatchNorm2d", "SiLU"] * 2  # the operator after a convolution and a normalisation
