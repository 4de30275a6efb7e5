import pytest
import torch

from opcost.model.opspec import config_id, describe, strip_replay, synthesize


def test_synthesize_reproduces_shape_dtype_and_strides():
    w = torch.randn(6, 4).t()  # transposed: non-contiguous
    idx = torch.tensor([3, 1, 2])
    desc = describe([w, idx, 2.5, [1, 2], torch.float16, None])
    w2, idx2, f, lst, dt, none = synthesize(desc)
    assert w2.shape == w.shape and w2.stride() == w.stride() and w2.dtype == w.dtype
    assert idx2.tolist() == [3, 1, 2]  # small integer tensors replay with their values (indices stay valid)
    assert (f, lst, dt, none) == (2.5, [1, 2], torch.float16, None)


def test_large_integer_tensors_keep_range_and_order():
    offsets = torch.arange(0, 50000, 5)
    (o2,) = synthesize(describe([offsets]))
    assert o2.shape == offsets.shape and int(o2.min()) >= 0 and int(o2.max()) <= 49995
    assert bool((o2[1:] >= o2[:-1]).all())


def test_config_id_ignores_index_values_but_not_shapes():
    a = describe([torch.tensor([1, 2, 3])])
    b = describe([torch.tensor([7, 8, 9])])
    c = describe([torch.tensor([1, 2, 3, 4])])
    assert strip_replay(a) == strip_replay(b)
    assert config_id("op", {}, a, "inference") == config_id("op", {}, b, "inference")
    assert config_id("op", {}, a, "inference") != config_id("op", {}, c, "inference")
    assert config_id("op", {}, a, "inference") != config_id("op", {}, a, "training")


def test_callables_have_stable_descriptions():
    assert describe(torch.nn.functional.relu) == describe(torch.nn.functional.relu)
    assert "0x" not in str(describe(torch.nn.functional.relu))


def test_operator_names_round_trip_through_replay():
    from opcost.model.extract import overload_name
    from opcost.model.replay import op_overload

    for func in (torch.ops.aten.add_.Tensor, torch.ops.aten.relu.default, torch.ops.aten.flatten.using_ints):
        assert op_overload(overload_name(func)) is func
    assert overload_name(torch.ops.aten.relu.default) == "aten.relu.default"


def _layouts():
    base = torch.randn(4, 6, 8)
    return {
        "expanded": torch.randn(1, 1, 8).expand(3, 5, 8),  # a class token fed to cat: stride 0
        "overlapping": torch.randn(20).as_strided((4, 4), (2, 1)),  # rows share elements
        "transposed": base.transpose(0, 2),
        "channels_last": torch.randn(2, 3, 5, 5).to(memory_format=torch.channels_last),
        "storage_offset": base[1:, 2:],  # a view that does not start its buffer
        "view_of_larger": base[:, 0],  # the first token of every sequence
        "expanded_ints": torch.arange(7).expand(3, 7),  # position ids
        "overlapping_ints": torch.arange(20).as_strided((4, 4), (2, 1)),
    }


@pytest.mark.parametrize("kind", list(_layouts()))
def test_any_layout_replays_with_its_strides_and_real_values(kind):
    t = _layouts()[kind]
    desc = describe([t])
    (s,) = synthesize(desc)
    assert (s.shape, s.stride(), s.storage_offset(), s.dtype) == (t.shape, t.stride(), t.storage_offset(), t.dtype)
    if t.is_floating_point():
        assert torch.isfinite(s).all() and s.std() > 0
        assert torch.equal(torch.cat([s, s]), torch.cat([s.contiguous(), s.contiguous()]))  # readable by ops
    else:
        assert torch.equal(s, t)  # stored integers (indices, position ids) replay exactly, in their layout
    # the storage offset is replay-only: the same operator configuration whatever the view's position
    same = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    assert config_id("op", {}, desc, "inference") == config_id("op", {}, describe([same]), "inference")
