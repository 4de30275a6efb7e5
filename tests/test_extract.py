"""Extraction counts derived from the architectures, training attribution, ids and dedup."""
import json
from collections import Counter

import pytest
import torch

from opcost.model.extract import extract, record_calls
from opcost.model.sources import load_model
from opcost.model.workload import make_workload


def counts(df, scope):
    sub = df[df["scope"] == scope]
    return dict(Counter({k: int(v) for k, v in sub.groupby("op_type")["count"].sum().items()}))


@pytest.fixture(scope="module")
def resnet18_inference():
    return extract(make_workload(load_model("resnet18", {}), 2, "inference"))


def test_resnet18_inference_counts(resnet18_inference):
    df = resnet18_inference
    assert counts(df, "module") == {"Conv2d": 20, "BatchNorm2d": 20, "ReLU": 17, "MaxPool2d": 1,
                                    "AdaptiveAvgPool2d": 1, "Linear": 1}
    # the only work outside leaf modules: 8 residual `out += identity` and the flatten before fc
    assert counts(df, "functional") == {"add_": 8, "flatten": 1}
    assert set(df.loc[df["op_type"] == "add_", "api"]) == {"add_"}
    # ReLU modules are called twice per BasicBlock: 8 blocks x 2 + the stem
    relu_paths = [p for ps in df.loc[df["op_type"] == "ReLU", "module_paths"] for p in json.loads(ps)]
    assert "layer1.0.relu" in relu_paths


def test_resnet18_configurations_are_deduplicated(resnet18_inference):
    df = resnet18_inference
    assert df["config_id"].is_unique
    conv = df[df["op_type"] == "Conv2d"]
    # 20 conv calls but fewer distinct (shape, params) configurations; the 3x3 64->64 conv of layer1 occurs 4 times
    assert len(conv) < 20 and conv["count"].max() == 4
    params = json.loads(conv.iloc[0]["params"])
    assert params["in_channels"] == 3 and params["kernel_size"] == [7, 7] and params["bias"] is False
    assert json.loads(conv.iloc[0]["inputs"])[0]["T"] == [2, 3, 224, 224]


def test_config_ids_are_stable_and_batch_specific(resnet18_inference):
    again = extract(make_workload(load_model("resnet18", {}), 2, "inference"))
    assert list(again["config_id"]) == list(resnet18_inference["config_id"])
    other_batch = extract(make_workload(load_model("resnet18", {}), 1, "inference"))
    assert not set(other_batch["config_id"]) & set(resnet18_inference["config_id"])


def test_tiny_bert_inference_counts():
    df = extract(make_workload(load_model("tiny_bert", {}), 2, "inference"))
    mods = counts(df, "module")
    # embedding; LayerNorm: embeddings + 2 per layer; Linear: 2 FF per layer + pooler + classifier;
    # Dropout: embeddings + 3 per layer
    assert mods == {"Embedding": 1, "LayerNorm": 5, "Linear": 6, "Dropout": 7}
    fn = counts(df, "functional")
    assert fn["scaled_dot_product_attention"] == 2  # the attention of each layer, inside nn.MultiheadAttention
    assert fn["linear"] == 4  # in-projection and out-projection of each layer (run functionally by MHA)
    assert fn["add"] == 5  # position add + 2 residuals per layer
    assert fn["relu"] == 2 and fn["tanh"] == 1
    attn_api = set(df.loc[df["op_type"] == "scaled_dot_product_attention", "api"])
    assert attn_api == {"multi_head_attention_forward"}


def test_positions_give_the_iteration_call_sequence(resnet18_inference):
    df = resnet18_inference
    pos = [json.loads(p) for p in df["positions"]]
    assert [len(p) for p in pos] == df["count"].tolist()
    flat = sorted(x for p in pos for x in p)
    assert flat == list(range(len(flat)))  # every recorded call exactly once
    assert [p[0] for p in pos] == sorted(p[0] for p in pos)  # `order` ranks configurations by first call
    first = df.set_index("op_type")
    assert json.loads(first.loc["Conv2d"].iloc[0]["positions"])[0] == 0  # conv1 is the first call
    relu = df[df["op_type"] == "ReLU"].sort_values("count").iloc[-1]
    assert relu["count"] > 1 and len(set(json.loads(relu["positions"]))) == relu["count"]


def test_tiny_dlrm_inference_counts():
    df = extract(make_workload(load_model("tiny_dlrm", {}), 4, "inference"))
    assert counts(df, "module") == {"EmbeddingBag": 8, "Linear": 4, "ReLU": 3}
    fn = counts(df, "functional")
    assert {k: fn[k] for k in ("stack", "bmm", "transpose", "index", "cat", "sigmoid")} == {
        "stack": 1, "bmm": 1, "transpose": 1, "index": 1, "cat": 1, "sigmoid": 1}
    assert fn["select"] == 16  # indices[k] and offsets[k] for 8 tables


def test_user_callable_model():
    spec = {"model": "tests.tiny_models:make_mlp", "kwargs": {"width": 4}, "input_shapes": [[8]]}
    df = extract(make_workload(load_model("mlp", spec), 3, "inference"))
    assert counts(df, "module") == {"Linear": 3}
    assert counts(df, "functional") == {"relu": 1, "add_": 1, "flatten": 1}


def test_releases_say_when_the_model_drops_each_output():
    spec = {"model": "tests.tiny_models:make_mlp", "kwargs": {"width": 4}, "input_shapes": [[8]]}
    df = extract(make_workload(load_model("mlp", spec), 3, "inference"))
    calls = sorted((p, r, t) for ps, rs, t in zip(df["positions"], df["releases"], df["op_type"])
                   for p, r in zip(json.loads(ps), json.loads(rs)))
    # h = fc1(x) lives in a local until forward returns (the end, 5); relu's temporary dies once fc2 (2) returns;
    # fc2's output once `h +=` (3) has run; add_ returns h itself; out's output is flattened (5), which is returned
    assert calls == [(0, 5, "Linear"), (1, 2, "relu"), (2, 3, "Linear"), (3, 5, "add_"), (4, 5, "Linear"),
                     (5, 5, "flatten")]


def test_feeds_name_the_call_whose_output_each_input_is():
    spec = {"model": "tests.tiny_models:make_mlp", "kwargs": {"width": 4}, "input_shapes": [[8]]}
    df = extract(make_workload(load_model("mlp", spec), 3, "inference"))
    calls = sorted((p, f, t) for ps, fs, t in zip(df["positions"], df["feeds"], df["op_type"])
                   for p, f in zip(json.loads(ps), json.loads(fs)))
    # fc1 reads the model input; relu fc1's output; fc2 relu's; `h +=` h (fc1's) and fc2's output and returns h,
    # which `out` then reads as add_'s output (the latest call to return it); flatten reads out's
    assert calls == [(0, [None], "Linear"), (1, [[0, 0]], "relu"), (2, [[1, 0]], "Linear"),
                     (3, [[0, 0], [2, 0]], "add_"), (4, [[3, 0]], "Linear"), (5, [[4, 0]], "flatten")]


def test_training_attributes_every_backward_node():
    wl = make_workload(load_model("resnet18", {}), 2, "training")
    assert record_calls(wl).unattributed == 0
    df = extract(wl)
    bwd = Counter()
    for row in df.itertuples():
        for node, n in json.loads(row.backward).items():
            bwd[(row.op_type, node)] += n
    assert bwd[("Conv2d", "ConvolutionBackward0")] == 20
    assert bwd[("Conv2d", "torch::autograd::AccumulateGrad")] == 20  # one weight each, no bias
    assert bwd[("BatchNorm2d", "NativeBatchNormBackward0")] == 20
    assert bwd[("ReLU", "ReluBackward0")] == 17
    assert bwd[("add_", "AddBackward0")] == 8
    assert bwd[("Linear", "AddmmBackward0")] == 1
    # training extraction also captures the loss and the (decomposed) flatten outside leaf modules
    assert set(df.loc[df["scope"] == "functional", "api"]) >= {"flatten", "mean", "add_"}
    assert "<loss>" in {p for ps in df["module_paths"] for p in json.loads(ps)}


def test_training_backward_covers_functional_attention():
    wl = make_workload(load_model("tiny_bert", {"kwargs": {"dropout": 0.0}}), 2, "training")
    assert record_calls(wl).unattributed == 0
    df = extract(wl)
    nodes = Counter()
    for row in df[df["scope"] == "functional"].itertuples():
        nodes.update(json.loads(row.backward))
    # the attention (fused on CPU) and MHA's in/out projections of both layers run outside any leaf module
    assert sum(n for k, n in nodes.items() if "Attention" in k) == 2
    assert nodes["AddmmBackward0"] == 4
    assert nodes["torch::autograd::AccumulateGrad"] >= 1  # the position parameter and MHA's in-projection


def test_extraction_leaves_the_model_usable():
    loaded = load_model("tiny_dlrm", {})
    wl = make_workload(loaded, 2, "inference")
    extract(wl)
    assert not loaded.module._forward_hooks and not loaded.module._forward_pre_hooks
    with torch.inference_mode():
        assert loaded.module(*wl.inputs).shape == (2, 1)



def test_a_module_class_the_op_table_does_not_list_keeps_the_aten_calls_it_runs():
    entry = {"model": "tests.tiny_models:make_passes", "kwargs": {"passes": 3}, "input_shapes": [[8]]}
    df = extract(make_workload(load_model("passes", entry), 2, "inference"))
    inside = json.loads(df.loc[df["op_type"] == "Passes", "inside"].iloc[0])
    assert {e["op_type"]: e["count"] for e in inside} == {"mul": 3, "relu": 1}  # one entry per distinct call
    assert [s["T"] for s in inside[0]["inputs"]] == [[2, 16]]
    assert df.loc[df["op_type"] == "Linear", "inside"].isna().all()  # a class the table places: nothing kept
    assert counts(df, "functional") == {}  # the calls inside a leaf are no functional rows of the workload
