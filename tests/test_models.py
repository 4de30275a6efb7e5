"""Model resolution (torchvision, built-ins, module:callable, timm:, hf:) and bad input: one line naming the model."""
import pytest
import torch
import yaml

from opcost.check import check_workload
from opcost.errors import OpcostError
from opcost.model.sources import load_model
from opcost.model.workload import loss_of, make_workload

SMALL_BERT = {"model": "hf:BertModel", "seq_len": 16,
              "kwargs": dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                             vocab_size=100)}
SMALL_GPT2 = {"model": "hf:gpt2", "seq_len": 16, "kwargs": dict(n_layer=1, n_embd=32, n_head=2, vocab_size=100)}
SMALL_VIT = {"model": "timm:vit_tiny_patch16_224", "kwargs": {"img_size": 32, "depth": 2}}


def test_torchvision_builtin_and_callable_resolve():
    assert type(load_model("resnet18", {}).module).__name__ == "ResNet"
    assert type(load_model("tiny_dlrm", {}).module).__name__ == "TinyDLRM"
    m = load_model("x", {"model": "tests.tiny_models:make_mlp", "kwargs": {"width": 4}, "input_shapes": [[8]]})
    assert m.module.fc1.out_features == 4 and m.make_inputs(3)[0].shape == (3, 8)


def test_timm_models_by_name_with_their_own_input_size():
    m = load_model("vit", SMALL_VIT)
    assert type(m.module).__name__ == "VisionTransformer" and len(m.module.blocks) == 2  # kwargs passed through
    assert m.make_inputs(2)[0].shape == (2, 3, 32, 32)  # the model's input size follows img_size
    assert load_model("vit", {**SMALL_VIT, "input_shapes": [[3, 48, 48]]}).make_inputs(1)[0].shape == (1, 3, 48, 48)


def test_hf_models_from_config_classes_with_token_ids_and_mask():
    bert = load_model("bert", SMALL_BERT)
    assert bert.module.model.config.num_hidden_layers == 1  # kwargs override the config; random weights
    ids, mask = bert.make_inputs(3)
    assert ids.shape == mask.shape == (3, 16) and ids.dtype == torch.long and int(ids.max()) < 100
    assert bool((mask == 1).all())
    gpt2 = load_model("gpt2", SMALL_GPT2)  # a model type (AutoModel of it) instead of a class
    assert type(gpt2.module.model).__name__ == "GPT2Model" and gpt2.module.model.config.use_cache is False
    for arch in ("llama", "mistral"):  # derived settings follow the kwargs, as in transformers' own config classes
        small = load_model(arch, {"model": f"hf:{arch}", "kwargs": dict(
            num_hidden_layers=1, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
            vocab_size=100)}).module.model.config
        assert small.head_dim == 16 and small.hidden_size == 64
    vit = load_model("hfvit", {"model": "hf:ViTModel", "kwargs": dict(num_hidden_layers=1, hidden_size=32,
                     num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=16)})
    assert vit.make_inputs(2)[0].shape == (2, 3, 32, 32)  # pixel values of the config's size


def test_training_loss_from_model_outputs_of_any_structure():
    wl = make_workload(load_model("bert", SMALL_BERT), 2, "training")  # a ModelOutput: last_hidden_state
    wl.step()
    assert wl.model.module.model.embeddings.word_embeddings.weight.grad is not None
    x = torch.ones(2, requires_grad=True)
    assert loss_of(({"a": torch.arange(3), "b": [x * 2]},)).item() == 2.0  # nested: first float needing grad
    with pytest.raises(OpcostError, match="model ints: training needs a differentiable output"):
        loss_of(torch.arange(3), "ints")


@pytest.mark.parametrize("name, spec", [("vit", SMALL_VIT), ("bert", SMALL_BERT), ("gpt2", SMALL_GPT2),
                                        ("convnext", {"model": "timm:convnext_atto"})])
@pytest.mark.parametrize("mode", ["inference", "training"])
def test_every_configuration_of_zoo_models_replays(name, spec, mode):
    # batch 2: the ViTs' class token and BERT's position ids are expanded (stride 0) inputs
    res = check_workload(name, spec, 2, mode)
    assert res.error is None and res.configs > 10 and res.replay_failures == {}, res.first_failure()


def test_a_configuration_that_cannot_replay_is_reported_not_raised():
    res = check_workload("picky", {"model": "tests.tiny_models:make_picky", "input_shapes": [[8]]}, 2, "inference")
    assert res.error is None and list(res.replay_failures) and not res.ok
    (what, why), = res.replay_failures.items()
    assert what.endswith(" Picky") and why == "ValueError: picky: inputs must be positive"


@pytest.mark.parametrize("name, spec, needle", [
    ("nosuch", {}, "unknown model 'nosuch'"),
    ("boom", {"model": "tests.tiny_models:explode"}, "RuntimeError: this factory always fails"),
    ("missing", {"model": "tests.tiny_models:nothing_here"}, "cannot import"),
    ("badkw", {"model": "resnet18", "kwargs": {"no_such_kwarg": 1}}, "model badkw"),
    ("notimm", {"model": "timm:no_such_net"}, "timm has no model 'no_such_net'"),
    ("nohf", {"model": "hf:NoSuchModel"}, "neither a transformers model class"),
    ("hfkw", {"model": "hf:BertModel", "kwargs": {"no_such_setting": 1}}, "BertConfig has no setting"),
])
def test_bad_models_fail_with_one_line(name, spec, needle):
    with pytest.raises(OpcostError) as e:
        load_model(name, spec)
    msg = str(e.value)
    assert msg.startswith(f"model {name}:") and needle in msg and "\n" not in msg


def test_a_model_larger_than_the_free_memory_is_refused_before_it_is_built(monkeypatch):
    """A transformers model type's defaults are the full-size model (hf:llama: 26 GB in float32, more than this
    VM has): it is sized on the meta device and refused in one line, not built until the host runs out of memory.
    The free memory is the OS's answer, set here to 200 MB."""
    from opcost.model import sources

    monkeypatch.setattr(sources, "available_memory", lambda device="cpu": 200 * 2 ** 20)
    assert load_model("gpt2", SMALL_GPT2).module is not None  # a few MB: built
    with pytest.raises(OpcostError) as e:
        load_model("gpt2full", {"model": "hf:gpt2"})  # 124 M parameters, 0.5 GB
    msg = str(e.value)
    assert msg.startswith("model gpt2full: hf:gpt2 has 0.12 billion parameters") and "0.2 GB free on cpu" in msg
    assert "\n" not in msg


def test_input_shape_the_model_rejects():
    m = load_model("mlp", {"model": "tests.tiny_models:make_mlp", "input_shapes": [[5]]})
    with pytest.raises(OpcostError) as e:
        make_workload(m, 2, "inference")
    assert str(e.value).startswith("model mlp: inference at batch 2 with inputs [(2, 5)] failed")


def test_check_models_names_what_would_fail_before_a_long_run(tmp_path, capsys, monkeypatch):
    from opcost.cli import main

    (tmp_path / "my_models.py").write_text("from tests.tiny_models import make_mlp, make_picky\n")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"batch_sizes": [2], "models": {
        "mlp": {"model": "my_models:make_mlp", "input_shapes": [[8]]},  # a module in the working directory
        "picky": {"model": "my_models:make_picky", "input_shapes": [[8]]},
        "gone": {"model": "nowhere:make"}}}))
    monkeypatch.chdir(tmp_path)
    assert main(["check-models", "c.yaml"]) == 1
    out = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert out["mlp/inference/b2"].startswith("ok, 6 configurations")
    assert out["picky/inference/b2"].startswith("FAILED replay ") and out["picky/inference/b2"].endswith(
        " Picky: ValueError: picky: inputs must be positive")
    assert out["gone/inference/b2"].startswith("FAILED load: model gone: cannot import 'nowhere:make'")
    assert main(["check-models", "c.yaml", "--models", "mlp"]) == 0
