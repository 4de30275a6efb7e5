"""Model resolution and bad input: one line naming the model and the cause."""
import pytest

from opcost.errors import OpcostError
from opcost.models import load_model
from opcost.workload import make_workload


def test_torchvision_builtin_and_callable_resolve():
    assert type(load_model("resnet18", {}).module).__name__ == "ResNet"
    assert type(load_model("tiny_dlrm", {}).module).__name__ == "TinyDLRM"
    m = load_model("x", {"model": "tests.tiny_models:make_mlp", "kwargs": {"width": 4}, "input_shapes": [[8]]})
    assert m.module.fc1.out_features == 4 and m.make_inputs(3)[0].shape == (3, 8)


@pytest.mark.parametrize("name, spec, needle", [
    ("nosuch", {}, "unknown model 'nosuch'"),
    ("boom", {"model": "tests.tiny_models:explode"}, "RuntimeError: this factory always fails"),
    ("missing", {"model": "tests.tiny_models:nothing_here"}, "cannot import"),
    ("badkw", {"model": "resnet18", "kwargs": {"no_such_kwarg": 1}}, "model badkw"),
])
def test_bad_models_fail_with_one_line(name, spec, needle):
    with pytest.raises(OpcostError) as e:
        load_model(name, spec)
    msg = str(e.value)
    assert msg.startswith(f"model {name}:") and needle in msg and "\n" not in msg


def test_input_shape_the_model_rejects():
    m = load_model("mlp", {"model": "tests.tiny_models:make_mlp", "input_shapes": [[5]]})
    with pytest.raises(OpcostError) as e:
        make_workload(m, 2, "inference")
    assert str(e.value).startswith("model mlp: inference at batch 2 with inputs [(2, 5)] failed")
