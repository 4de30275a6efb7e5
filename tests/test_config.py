from pathlib import Path

import pytest
import yaml

from opcost.config import validate, workloads
from opcost.errors import OpcostError

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_are_filled():
    cfg = validate({"models": {"resnet18": {}}})
    assert cfg["batch_sizes"] == [1, 8] and cfg["modes"] == ["inference"] and cfg["device"] == "cpu"
    assert cfg["profile"]["timing"]["target_rel_ci"] == 0.02
    assert cfg["e2e"]["timing"]["max_seconds"] == 10.0


def test_the_settings_classes_defaults_are_the_schemas():
    """One source for every default: a settings object built without a config (as library users and benchmarks
    build them) is the one the workflow builds from a config that names only its models, on a CPU; the placement's
    tiers aside (none unless named: the library places nothing unless told)."""
    import dataclasses

    from opcost.analysis.loop import LoopSettings
    from opcost.measure.energy import EnergySettings
    from opcost.measure.placement import Settings
    from opcost.measure.profile import ProfileSettings
    from opcost.measure.timing import TimingSettings

    cfg = validate({"models": {"m": {}}})
    assert ProfileSettings() == dataclasses.replace(ProfileSettings.from_config(cfg), placement=Settings(
        max_per_config=cfg["placement"]["max_per_config"], on_missing=cfg["placement"]["on_missing"],
        params=cfg["placement"]["params"]))
    assert dataclasses.replace(Settings.from_config(cfg["placement"]), tiers=()) == Settings()
    assert TimingSettings() == TimingSettings.from_config(cfg["profile"]["timing"])
    assert EnergySettings() == EnergySettings.from_config(cfg["energy"])
    assert LoopSettings() == LoopSettings.from_config(cfg["loop"])


def test_a_config_naming_only_its_models_runs_the_shipped_study():
    """One set of defaults: the schema's defaults are config/config.yaml's values, so a user's config that lists
    only its models (``--configfile`` replaces the shipped file) runs the same study as ``make run``; all but the
    shipped `predict_only` models, which a config of one's own names (or copies) where its intervals should rest on
    them (config/README.md)."""
    import copy

    shipped = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    mine = validate({"models": copy.deepcopy(shipped["models"])})
    assert mine["predict_only"] == {} and len(shipped["predict_only"]) >= 2
    assert mine == validate({**copy.deepcopy(shipped), "predict_only": {}})


@pytest.mark.parametrize("bad, culprit", [
    ({"models": {"m": {"batch_sizes": ["x"]}}}, "config: models.m.batch_sizes[0]"),
    ({"models": {"m": {}}, "batch_size": [1]}, "config: batch_size: unknown key"),
    ({"models": {"m": {"modes": ["train"]}}}, "config: models.m.modes[0]"),
    ({"models": {"m": {}}, "device": "tpu"}, "config: device"),
    ({"models": {"m": {}}, "profile": {"timing": {"max_seconds": 0}}}, "config: profile.timing.max_seconds"),
    ({}, "config: (top level): 'models' is a required property"),
    ({"models": {"m": {}}, "batch_sizes": [2, 2]}, "config: batch_sizes: [2, 2] has non-unique elements"),
    ({"models": {"m": {"modes": ["training", "training"]}}}, "config: models.m.modes: ['training', 'training'] has"),
    ({"models": {"a/b": {}}}, "config: models.a/b: a model name names files"),
    ({"models": {"timm:vit": {}}}, "config: models.timm:vit: a model name names files"),
    ({"models": {"m": {"input_dtype": "float33"}}}, "config: models.m.input_dtype: 'float33' is not one of"),
    ({"models": {"m": {}}, "loop": {"target": 1.5}}, "config: loop.target: 1.5 is greater than the maximum of 1"),
])
def test_errors_are_one_line_naming_the_key(bad, culprit):
    with pytest.raises(OpcostError) as e:
        validate(bad)
    assert str(e.value).startswith(culprit) and "\n" not in str(e.value)


def test_workloads_use_per_model_overrides():
    cfg = validate({"models": {"a": {}, "b": {"batch_sizes": [4], "modes": ["training"]}}, "batch_sizes": [1, 2]})
    assert workloads(cfg) == [("a", "inference", 1), ("a", "inference", 2), ("b", "training", 4)]


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in
                                        [*(ROOT / "config").glob("*.yaml"), *(ROOT / "tests" / "data").glob("*.yaml")]))
def test_every_shipped_config_is_valid(path):
    cfg = validate(yaml.safe_load((ROOT / path).read_text()))
    assert workloads(cfg)
