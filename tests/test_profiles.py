"""The SLURM profiles stay right as shipped: YAML without duplicate keys (a second entry for a rule under
set-resources silently replaces the first: the old "uncomment the GPU block" failure, which dropped `--exclusive`
and `profile`'s CPUs), and in a real dry run on the tiny config every measuring job gets an exclusive node with the
runtime and CPUs of profiles/slurm, and in profiles/slurm-gpu also one GPU with one task."""
import importlib.util
import re

import pytest
import yaml

from tests.helpers import ROOT, TINY, snakemake

PROFILES = {"cpu": ROOT / "profiles" / "slurm", "gpu": ROOT / "profiles" / "slurm-gpu"}
# the rules with `measure` in their resources (workflow/rules/*.smk); the dry run finds them by that resource too
MEASURING = {"profile", "e2e", "e2e_tier", "alone", "insitu", "trace", "coplace", "unseen"}
# rules that build the models on the configured device or look for its memory tiers: on GPU nodes in slurm-gpu
ON_DEVICE = {"extract", "sweeps", "placement_tiers"}
HAS_SLURM_PLUGIN = importlib.util.find_spec("snakemake_executor_plugin_slurm") is not None


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a key repeated in one mapping is an error instead of replacing the first."""


def _mapping_without_duplicates(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError("while constructing a mapping", node.start_mark,
                                                    f"found duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def load_profile(name: str) -> dict:
    return yaml.load((PROFILES[name] / "config.yaml").read_text(), Loader=UniqueKeyLoader)


def test_loader_rejects_the_old_failure_mode():
    old = "set-resources:\n  profile:\n    slurm_extra: \"'--exclusive'\"\n  profile:\n    gpu: 1\n"
    assert yaml.safe_load(old)["set-resources"]["profile"] == {"gpu": 1}  # what PyYAML silently did
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key 'profile'"):
        yaml.load(old, Loader=UniqueKeyLoader)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_is_complete_yaml_without_duplicate_keys(name):
    profile = load_profile(name)
    assert profile["executor"] == "slurm"
    assert MEASURING <= set(profile["set-resources"]), f"{name}: measuring rules without set-resources"
    text = (PROFILES[name] / "config.yaml").read_text()
    assert not re.search(r"^\s*#\s*[\w-]+:", text, flags=re.M), f"{name}: a commented-out entry to uncomment"


def _parse_dry_run(out: str) -> dict[str, list[dict]]:
    """{rule: [resources of each of its jobs]} from a dry run's job listing."""
    jobs, rule = {}, None
    for line in out.splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):$", line):
            rule = m.group(1)
        elif (m := re.match(r"^\s+resources: (.*)$", line)) and rule:
            jobs.setdefault(rule, []).append(dict(kv.split("=", 1) for kv in m.group(1).split(", ")))
            rule = None
    return jobs


def _from_profile(name: str) -> dict[str, list[dict]]:
    """Without the SLURM plugin: what the profile gives each rule (default-resources updated by set-resources)."""
    profile = load_profile(name)
    jobs = {}
    for rule in MEASURING | ON_DEVICE | {"catalog", "figures"}:
        res = {k: str(v) for k, v in {**profile["default-resources"],
                                      **profile["set-resources"].get(rule, {})}.items()}
        if rule in MEASURING:
            res["measure"] = "100"
        if "slurm_extra" in res:
            res["slurm_extra"] = res["slurm_extra"].strip("'\"")
        jobs[rule] = [res]
    return jobs


@pytest.fixture(scope="module")
def resources(tmp_path_factory) -> dict[str, dict[str, list[dict]]]:
    """Per profile, the resources each job gets: from a real `snakemake -n` with the SLURM executor (no sbatch needed
    for a dry run), or, where the plugin is missing, from the profile itself."""
    if not HAS_SLURM_PLUGIN:
        return {name: _from_profile(name) for name in PROFILES}
    found = {}
    for name, path in PROFILES.items():
        work = tmp_path_factory.mktemp(f"dry_{name}")
        proc = snakemake("--workflow-profile", str(path), "--configfile", str(TINY), "-n", cwd=work, timeout=120)
        out = proc.stdout + proc.stderr
        assert f"Using workflow specific profile {path}" in out
        found[name] = _parse_dry_run(out)
    return found


def _measuring(jobs: dict[str, list[dict]]) -> dict[str, list[dict]]:
    return {rule: rs for rule, rs in jobs.items() if any(r.get("measure") == "100" for r in rs)}  # every other rule: 1


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_measuring_job_gets_an_exclusive_node(resources, name):
    measuring = _measuring(resources[name])
    assert set(measuring) == MEASURING, "the tiny config's measuring rules changed: update MEASURING and profiles"
    for rule, jobs in measuring.items():
        for res in jobs:
            assert "--exclusive" in res.get("slurm_extra", "").split(), (name, rule, res)


def test_gpu_profile_gives_measuring_jobs_one_gpu_and_the_cpu_profiles_cpus_and_runtime(resources):
    cpu, gpu = resources["cpu"], resources["gpu"]
    for rule in MEASURING:
        c, g = cpu[rule][0], gpu[rule][0]
        assert (g.get("gpu"), g.get("tasks")) == ("1", "1"), (rule, g)
        assert g["slurm_partition"] != c["slurm_partition"], (rule, g)
        assert int(g["cpus_per_task"]) >= int(c["cpus_per_task"]), (rule, g, c)
        assert int(g["runtime"]) >= int(c["runtime"]), (rule, g, c)
        assert "gpu" not in c, (rule, c)
    assert int(cpu["profile"][0]["cpus_per_task"]) == 4  # the profiling chunks' CPUs
    for rule in ON_DEVICE:  # model building and tier discovery see the GPU too, without a whole node
        g = gpu[rule][0]
        assert (g.get("gpu"), g.get("tasks"), g["slurm_partition"]) == ("1", "1", gpu["profile"][0]["slurm_partition"])
        assert "--exclusive" not in g.get("slurm_extra", ""), (rule, g)
    others = set(gpu) - MEASURING - ON_DEVICE
    assert others and all("gpu" not in r for rule in others for r in gpu[rule]), "table and figure jobs hold a GPU"


@pytest.mark.skipif(not HAS_SLURM_PLUGIN, reason="snakemake-executor-plugin-slurm not installed")
@pytest.mark.parametrize("name", sorted(PROFILES))
def test_slurm_extra_holds_no_option_the_plugin_rejects(resources, name):
    from snakemake_executor_plugin_slurm.validation import get_forbidden_slurm_options

    for rule, jobs in resources[name].items():
        for res in jobs:
            extra = res.get("slurm_extra", "")
            assert not any(re.search(p, extra) for p in get_forbidden_slurm_options()), (name, rule, extra)
