"""Op-type labels: a reader tells a module call (`Linear`) from a functional call (`aten::linear`), while the keys
the tables and the cost model use stay as they are."""
import json

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from opcost.analysis import optypes
from opcost.measure.engine import ENGINE_OP_TYPE
from opcost.model.extract import extract
from opcost.model.sources import LoadedModel
from opcost.model.workload import make_workload


class _Both(nn.Module):
    """An nn.Linear and a functional linear (a tied projection), as in a decoder with a tied head."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return F.linear(torch.relu(self.proj(x)), self.proj.weight)


@pytest.mark.parametrize("op_type, scope, shown", [
    ("Linear", "module", "Linear"),
    ("linear", "functional", "aten::linear"),
    ("Linear", None, "Linear"),  # no scope: a capitalised name is a module class
    ("linear", None, "aten::linear"),
    ("add_", None, "aten::add_"),
    ("_softmax", None, "aten::_softmax"),
    ("aten::linear", None, "aten::linear"),  # a trace's top-level op: already says what it is
    ("autograd::engine::evaluate_function: AddmmBackward0", None,
     "autograd::engine::evaluate_function: AddmmBackward0"),
    (ENGINE_OP_TYPE, None, ENGINE_OP_TYPE),
    ("<end>", None, "<end>"),
    ("other", None, "other"),  # the figures' fold of the smaller types
    ("picky", "module", "picky"),  # a module class with a lower-case name is still a module
])
def test_labels_tell_a_module_from_a_functional_call(op_type, scope, shown):
    assert optypes.label(op_type, scope) == shown


def test_a_model_calling_linear_both_ways_shows_two_distinct_labels_over_unchanged_keys():
    torch.manual_seed(0)
    wl = make_workload(LoadedModel("both", _Both(), lambda batch, seed=0: (torch.randn(batch, 8),)), 2, "inference")
    layers = extract(wl)
    keys = layers[["op_type", "scope"]].drop_duplicates().values.tolist()
    assert ["Linear", "module"] in keys and ["linear", "functional"] in keys  # the keys as stored
    shown = dict(zip(zip(layers["op_type"], layers["scope"]), optypes.labels(layers)))
    assert shown[("Linear", "module")] == "Linear" and shown[("linear", "functional")] == "aten::linear"
    assert optypes.labels(layers[["op_type"]]) == optypes.labels(layers)  # the name alone says the same here
    assert optypes.labels(pd.DataFrame({"op_type": []})) == []


def test_the_breakdown_legend_names_the_module_and_the_functional_linear_apart():
    from opcost.report import figures

    torch.manual_seed(0)
    wl = make_workload(LoadedModel("both", _Both(), lambda batch, seed=0: (torch.randn(batch, 8),)), 2, "inference")
    layers = extract(wl)
    costed = layers.assign(cost_s=1e-3, backward_s=None)  # the legend's names, whatever the costs
    costed = costed.assign(total_s=costed["count"] * costed["cost_s"])
    measured = pd.DataFrame({"model": ["both"], "mode": ["inference"], "batch": [2],
                             "measured_s": [float(costed["total_s"].sum())]})
    forward, _ = figures.breakdown_fractions(costed, measured)
    assert {"Linear", "aten::linear"} <= set(forward.columns) and "linear" not in forward.columns
    assert forward.sum(axis=1).iloc[0] == pytest.approx(1.0)


class _StdConv2d(nn.Conv2d):
    """A convolution that standardises its weight first, with its own constructor (timm's ``StdConv2d``)."""

    def __init__(self, in_channel, out_channels, kernel_size, eps=1e-6):
        super().__init__(in_channel, out_channels, kernel_size, bias=False)
        self.eps = eps

    def forward(self, x):
        w = F.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None, training=True,
                         eps=self.eps).reshape_as(self.weight)
        return F.conv2d(x, w, None, self.stride, self.padding)


def test_a_subclass_of_a_known_module_is_costed_as_its_base():
    """A module class the op table does not name, built on one it names, records that base and the base's
    constructor parameters: its work is counted as a convolution's (not as an unknown type's elementwise work, which
    put a ResNetV2's weight-standardised convolutions at a fraction of their cost), it takes the base's family,
    and the base is among its twins, so that a database that measured Conv2d answers for it."""
    from opcost.analysis.features import configuration_features

    model = nn.Sequential(_StdConv2d(8, 16, 3), nn.ReLU())
    layers = extract(make_workload(LoadedModel("std", model, lambda batch, seed=0: (torch.randn(batch, 8, 12, 12),)),
                                   2, "inference"))
    row = layers[layers["op_type"] == "_StdConv2d"].iloc[0]
    params = json.loads(row["params"])
    assert params[optypes.BASE] == "Conv2d" and params["in_channels"] == 8 and params["out_channels"] == 16
    f = configuration_features(row["op_type"], row["params"], row["inputs"], row["outputs"])
    assert f["flops"] == 2 * (2 * 16 * 10 * 10) * 8 * 9
    assert optypes.family("_StdConv2d", "Conv2d") == "convolution" and "Conv2d" in optypes.twins("_StdConv2d", "Conv2d")
    assert optypes.base_class(nn.Conv2d) is None and optypes.base_class(_StdConv2d) is nn.Conv2d
    assert optypes.lookup("_StdConv2d").work == "elementwise"  # without its base: an unknown type's


class _Norms(nn.Module):
    """A batch norm that computes its statistics (on the input, as a weight standardisation does on a weight) and
    one that reads stored statistics, both called outside leaf modules."""

    def __init__(self):
        super().__init__()
        self.keep = nn.Identity()  # a child: the module is no leaf, its aten calls are recorded
        self.register_buffer("mean", torch.zeros(8))
        self.register_buffer("var", torch.ones(8))

    def forward(self, x):
        x = F.batch_norm(x, None, None, training=True)
        return F.batch_norm(x, self.mean, self.var, training=False)


def test_a_batch_norm_that_computes_its_statistics_is_an_op_type_of_its_own():
    """A batch norm in training computes each channel's mean and variance from its input: 3 to 12 times the time of
    one that reads them, on one tensor. Its op type says so (``batch_norm_training``, no twin: never costed as the
    inference batch norm's law; no family: its costs never raise the normalisations' family law, which answers for a
    ConvNeXt's LayerNorm2d), in inference workloads too, and the `batch_norm_stats` sweep measures it."""
    from opcost.model.sources import load_model

    model = _Norms()
    layers = extract(make_workload(LoadedModel("norms", model, lambda batch, seed=0: (torch.randn(batch, 8, 16),)),
                                   2, "inference"))
    assert layers["op_type"].tolist().count("batch_norm_training") == 1
    assert layers["op_type"].tolist().count("batch_norm") == 1
    assert optypes.family("batch_norm_training") is None
    assert "BatchNorm2d" not in optypes.twins("batch_norm_training")
    assert "BatchNorm2d" in optypes.twins("batch_norm")
    point = load_model("sweep-bn", {"model": "opcost.model.sweeps:chain", "kwargs": {
        "op": "batch_norm_stats", "depth": 2, "channels": 16, "features": 36}, "input_shapes": [[16, 36]]})
    swept = extract(make_workload(point, 1, "inference"))
    assert set(swept["op_type"]) == {"batch_norm_training"}


def test_a_subclass_with_a_forward_of_its_own_is_composed_from_its_calls_not_its_bases_twin():
    """A subclass whose forward is its own (the weight standardised, then convolved) keeps its aten calls, and its
    estimate is their sum where its base's twin law answered (which sees the convolution alone); a subclass that
    only renames its base keeps the twin's answer."""
    import pandas as pd

    from opcost.analysis.composed import compose

    class _Renamed(nn.Conv2d):
        pass

    model = nn.Sequential(_StdConv2d(8, 16, 3), _Renamed(16, 16, 1))
    layers = extract(make_workload(LoadedModel("std", model, lambda batch, seed=0: (torch.randn(batch, 8, 12, 12),)),
                                   2, "inference"))
    std = layers[layers["op_type"] == "_StdConv2d"].iloc[0]
    assert {e["op_type"] for e in json.loads(std["inside"])} >= {"batch_norm_training", "conv2d"}
    assert layers.loc[layers["op_type"] == "_Renamed", "inside"].isna().all()
    rows = layers[layers["op_type"].isin(["_StdConv2d", "_Renamed"])].assign(
        phase="forward", cost_s=1.0, low_s=0.5, high_s=2.0, method="twin").reset_index(drop=True)
    part = 1e-3  # every aten call's estimate

    def estimate(p):
        return pd.DataFrame({"estimate": part, "low": part / 2, "high": part * 2}, index=p.index)

    compose(rows, pd.Series(dtype=float, index=pd.MultiIndex.from_arrays([[], []])), estimate)
    calls = sum(e["count"] for e in json.loads(std["inside"]))
    assert rows.loc[rows["op_type"] == "_StdConv2d", "method"].tolist() == ["composed"]
    assert rows.loc[rows["op_type"] == "_StdConv2d", "cost_s"].iloc[0] == pytest.approx(calls * part)
    assert rows.loc[rows["op_type"] == "_Renamed", ["method", "cost_s"]].values.tolist() == [["twin", 1.0]]


def test_a_listed_module_written_in_python_keeps_its_calls_and_costs_them_where_nothing_measured_its_twins():
    """GPT-2's tanh GELU and Llama's RMSNorm are about ten elementwise aten calls each: the table lists them (twins of
    one another's kind, family activation or normalisation) but, their twins never measured, the family's law sees
    one fused kernel. Their calls are kept at extraction and their estimate is the calls' sum."""
    import pandas as pd
    from transformers.activations import NewGELUActivation
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from opcost.analysis.composed import compose

    assert optypes.python_composed("NewGELUActivation") and optypes.python_composed("LlamaRMSNorm")
    assert not optypes.python_composed("GELU") and not optypes.python_composed("LayerNorm")
    model = nn.Sequential(nn.Linear(16, 16), NewGELUActivation(), LlamaRMSNorm(16), nn.GELU())
    layers = extract(make_workload(LoadedModel("py", model, lambda batch, seed=0: (torch.randn(batch, 4, 16),)),
                                   2, "inference"))
    inside = {t: layers.loc[layers["op_type"] == t, "inside"].iloc[0] for t in ("NewGELUActivation", "LlamaRMSNorm")}
    assert {e["op_type"] for e in json.loads(inside["NewGELUActivation"])} >= {"tanh", "mul", "add"}
    assert {e["op_type"] for e in json.loads(inside["LlamaRMSNorm"])} >= {"mean", "rsqrt"}
    assert layers.loc[layers["op_type"].isin(["Linear", "GELU"]), "inside"].isna().all()  # fused kernels: nothing kept
    rows = layers.assign(phase="forward", cost_s=1.0, low_s=0.5, high_s=2.0, method="family").reset_index(drop=True)
    part = 1e-3

    def estimate(p):
        return pd.DataFrame({"estimate": part, "low": part / 2, "high": part * 2}, index=p.index)

    compose(rows, pd.Series(dtype=float, index=pd.MultiIndex.from_arrays([[], []])), estimate)
    gelu = rows[rows["op_type"] == "NewGELUActivation"].iloc[0]
    assert gelu["method"] == "composed"
    assert gelu["cost_s"] == pytest.approx(sum(e["count"] for e in json.loads(inside["NewGELUActivation"])) * part)
    assert rows.loc[rows["op_type"] == "GELU", "method"].tolist() == ["family"]


class _Glue(nn.Module):
    """The aten calls models make between their modules that the op table once lacked (a weight reshaped as
    another, a cast to another's dtype, a padding, a repeat, a variance, an upsampling)."""

    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()

    def forward(self, x):
        w = self.act(x).flatten(1).reshape_as(x).type_as(x)
        y = F.pad(w, (1, 1, 1, 1)).repeat(1, 2, 1, 1)
        return F.interpolate(y, scale_factor=2.0) * y.var(dim=1, keepdim=True).mean()


def test_the_glue_calls_models_make_have_a_family_and_a_view_costs_no_work():
    """Every functional call of such a forward has a line of the table (a family to learn from, never only the
    `global` law of every op type), and ``reshape_as`` of a contiguous tensor is a view: no bytes, where the law of
    an unknown type counted the tensor's bytes (a weight-standardised convolution's 9 MB weight at a quarter of a
    millisecond per call)."""
    from opcost.analysis.features import configuration_features

    layers = extract(make_workload(LoadedModel("glue", _Glue(), lambda batch, seed=0: (torch.randn(batch, 4, 6, 6),)),
                                   1, "inference"))
    functional = layers[layers["scope"] == "functional"]
    assert {"reshape_as", "type_as", "var"} <= set(functional["op_type"])
    assert all(optypes.family(t) for t in functional["op_type"]), sorted(set(functional["op_type"]))
    row = functional[functional["op_type"] == "reshape_as"].iloc[0]
    assert configuration_features(row["op_type"], row["params"], row["inputs"], row["outputs"])["bytes"] == 0
    assert optypes.lookup("pad").family == "copy" and optypes.lookup("var").family == "reduction"
