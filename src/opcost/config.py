"""Configuration: validation against the JSON schema (defaults filled in) and the derived workload list.

The schema (``schemas/config.schema.yaml``, also at ``workflow/schemas/``) is the single definition of every key;
``config/README.md`` documents them. Errors are one line naming the key: ``config: models.x.batch_sizes[0]: ...``.
"""
from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from opcost.errors import OpcostError, Problems
from opcost.yaml_keys import duplicate_keys

MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
SCHEMA_PATH = Path(str(resources.files("opcost") / "schemas" / "config.schema.yaml"))


def schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def _with_defaults(cls):
    validate_props = cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, sch):
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if "default" in sub and prop not in instance:
                    instance[prop] = copy.deepcopy(sub["default"])
                elif "$ref" in sub and prop not in instance:
                    ref = validator._resolver.lookup(sub["$ref"]).contents
                    if "default" in ref:
                        instance[prop] = copy.deepcopy(ref["default"])
        yield from validate_props(validator, properties, instance, sch)

    return jsonschema.validators.extend(cls, {"properties": set_defaults})


def _integer(checker, instance) -> bool:
    """An int, never a float: JSON Schema takes ``2.0`` for an integer, but a YAML ``2.0`` is a Python float that
    ``range()`` refuses and that writes ``2.0`` into a rule's params (:func:`_coerce_floats` makes a whole one the int
    it means)."""
    return isinstance(instance, int) and not isinstance(instance, bool)


_Validator = jsonschema.validators.extend(
    _with_defaults(jsonschema.Draft202012Validator),
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _integer))


def _where(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _coerce_floats(config: dict, errors) -> bool:
    """Numbers YAML 1.1 reads as strings (``2e-7``, without the ``.0`` YAML 1.1 wants) taken as the numbers they
    are, where the schema expects a number, and whole floats (``2.0``) as the ints they mean, where it expects an
    integer, so that ``threads: 1.0`` is ``threads: 1`` (the same jobs, the same params); True when one was."""
    changed = False
    for e in errors:
        wanted = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
        if e.validator != "type" or not e.path:
            continue
        if "number" in wanted and isinstance(e.instance, str) and _FLOAT.fullmatch(e.instance.strip()):
            value = float(e.instance)
        elif "integer" in wanted and isinstance(e.instance, float) and e.instance.is_integer():
            value = int(e.instance)
        else:
            continue
        parent = config
        for p in list(e.path)[:-1]:
            parent = parent[p]
        parent[list(e.path)[-1]] = value
        changed = True
    return changed


def _line(e) -> str:
    """One schema error as one line naming the key."""
    if e.validator == "additionalProperties":
        extra = sorted(set(e.instance) - set(e.schema.get("properties", {})))
        return str(OpcostError(f"config: {_where(list(e.path) + [extra[0]]) if extra else _where(e.path)}",
                               "unknown key"))
    if e.validator in ("oneOf", "anyOf") and e.context:
        # the alternative of the value's own type says what is wrong (a type mismatch of the others says nothing)
        own = _own_alternative_error(e)
        why = (f"{e.instance!r} is not of the expected form" if own is not None and own.validator == "pattern" else
               f"{_where(own.path)}: {own.message}" if own is not None and own.path else
               own.message if own is not None else f"{e.instance!r} is none of the forms expected")
        return _expected(e.path, why, _description(e.schema_path))
    if e.validator == "pattern":  # the regular expression says nothing to a user; the value's description does
        return _expected(e.path, f"{e.instance!r} is not of the expected form",
                         e.schema.get("description") if isinstance(e.schema, dict) else None)
    return str(OpcostError(f"config: {_where(e.path)}", e.message))


def _expected(path, why: str, said: str | None) -> str:
    """One line naming the key at ``path``: what is wrong and, where the schema describes it, what is expected."""
    return str(OpcostError(f"config: {_where(path)}", why + (f" (expected: {said})" if said else "")))


def _own_alternative_error(e):
    """Of a oneOf/anyOf error, the first error of the one alternative the value was meant for (of its type, and for
    a mapping, one whose required keys it has); None when no single alternative is."""
    meant = []
    for i, alt in enumerate(e.schema[e.validator]):
        errs = [c for c in e.context if c.relative_schema_path and c.relative_schema_path[0] == i]
        if any(c.validator == "type" and not c.path for c in errs):
            continue
        if isinstance(e.instance, dict) and not set(alt.get("required", ())) <= set(e.instance):
            continue
        meant.append(errs)
    if len(meant) != 1 or not meant[0]:
        return None
    return sorted(meant[0], key=lambda c: -len(c.path))[0]


def _description(schema_path) -> str | None:
    """The description of the nearest schema along ``schema_path`` (from the root) that has one."""
    node, said = schema(), None
    for step in schema_path:
        node = node[step] if isinstance(node, (dict, list)) else None
        if node is None:
            break
        if isinstance(node, dict) and node.get("description"):
            said = node["description"]
    return said


# id of a validated config's `models` -> (that dict, the predict_only names validate put in it)
_MERGED: dict[int, tuple[dict, set[str]]] = {}


def validate(config: dict) -> dict:
    """Validate ``config`` in place, filling defaults; raise :class:`OpcostError` naming every bad key (one line
    each: :class:`opcost.errors.Problems` when there are several)."""

    while True:
        errors = sorted(_Validator(schema()).iter_errors(config), key=lambda e: (len(e.path), list(map(str, e.path))))
        if not (errors and _coerce_floats(config, errors)):
            break
    if errors:
        lines = list(dict.fromkeys(_line(e) for e in errors))
        if len(lines) == 1:
            culprit, _, cause = lines[0].partition(": ")
            raise OpcostError(culprit, cause)
        raise Problems(lines)
    if problems := _cross_checks(config):
        raise Problems(problems) if len(problems) > 1 else OpcostError(*problems[0].split(": ", 1))
    from opcost.model.sweep_points import PREFIX

    for name, entry in config["models"].items():  # a user's model in a sweep point's place: the point never measured
        if str(name).startswith(PREFIX) and not is_sweep(entry or {}):
            raise OpcostError(f"config: models.{name}", f"names starting {PREFIX!r} are the sweep points': rename it")
    for name, entry in sweep_entries(config).items():
        config["models"].setdefault(name, entry)  # idempotent: a validated config validates again unchanged
    merged = _MERGED.setdefault(id(config["models"]), (config["models"], set()))[1]  # held: its id stays its own
    for name, entry in config["predict_only"].items():  # built like any model; `workloads` tells them apart
        # a name under `models` that an earlier validation of this config did not put there is the user's: a model
        # profiled and predicted only at once (also when a YAML alias makes both entries one object)
        if name in config["models"] and name not in merged:
            raise OpcostError(f"config: predict_only.{name}", "also under `models`: a model is either profiled or "
                                                              "predicted only (remove one of the two)")
        config["models"][name] = entry
        merged.add(name)
    for name in config["models"]:
        if not isinstance(name, str):  # YAML reads an unquoted 2024 or 1e3 as a number
            raise OpcostError(f"config: models.{name}", "YAML reads this name as a number: quote it "
                                                        f"('{name}': ...) or give the model a name with letters")
        if not MODEL_NAME.fullmatch(name):
            raise OpcostError(f"config: models.{name}", "a model name names files and table rows: use letters, "
                                                        "digits and _ . + - (the entry's `model` says what to build)")
    return config


def with_options(config: dict, options: dict) -> dict:
    """``config`` with a command's options (top-level key -> value: ``--threads``, ``--device``) set, validated: a bad
    value is named by its option (``--device banana: ...``)."""
    try:
        return validate({**config, **options})
    except OpcostError as e:
        bad = next((k for k in options if str(e).startswith(f"config: {k}:")), None)
        if bad is None:
            raise
        raise OpcostError(f"--{bad} {options[bad]}", str(e).split(": ", 2)[-1]) from None


def _cross_checks(config: dict) -> list[str]:
    """What the schema cannot say of keys together, one line each: a timing section whose least samples exceed its
    most, a ``generate`` section that asks nothing (one list of two) or of no model that generates."""
    out = []
    for section in ("profile", "e2e", "insitu", "trace"):
        timing = (config.get(section) or {}).get("timing") or {}
        if timing.get("min_samples", 0) > timing.get("max_samples", float("inf")):
            out.append(f"config: {section}.timing.min_samples: {timing['min_samples']} is more than max_samples "
                       f"{timing['max_samples']}: raise max_samples or lower min_samples")
    ask = config.get("generate") or {}
    if bool(ask.get("prompts")) != bool(ask.get("new_tokens")):
        given, missing = ("prompts", "new_tokens") if ask.get("prompts") else ("new_tokens", "prompts")
        out.append(f"config: generate.{missing}: missing beside generate.{given}: a generate() question is a prompt "
                   f"length and a count of new tokens; give both lists")
    elif ask.get("prompts"):
        from opcost.model.modes import is_generation

        modes = {m for e in config["models"].values() for m in (e.get("modes") or config["modes"])}
        if not any(is_generation(m) or m in ("decode", "prefill") for m in modes):
            out.append("config: generate: no model has a decode or prefill mode, so nothing would be asked: give "
                       "the decoder `modes: [decode]` (and `context_lens`)")
    return out


def sweep_entries(config) -> dict[str, dict]:
    """The model entries of the config's sweep points (:func:`opcost.model.sweep_points.model_entries`), from its
    ``sweeps``, ``batch_sizes`` and ``modes`` (sweeps keep inference and training, never decode); none without
    sweeps (and no torch import)."""
    if not config["sweeps"]:
        return {}
    from opcost.model.sweep_points import model_entries

    op_modes = [m for m in config["modes"] if m in ("inference", "training")] or ["inference"]
    return model_entries(config["sweeps"], config["batch_sizes"], op_modes)


SWEEP_MODEL = "opcost.model.sweeps:chain"  # a sweep point's `model` (opcost.model.sweep_points.MODEL)


def is_sweep(entry: dict) -> bool:
    """Whether a config model entry is a sweep point (:mod:`opcost.model.sweep_points`)."""
    return entry.get("model") == SWEEP_MODEL


def load(path) -> dict:
    if not str(path).strip():
        raise OpcostError("config ''", "an empty path: give the config file's path")
    try:
        text = Path(path).read_text(encoding="utf-8")
        twice = duplicate_keys(text, str(path))
        if twice:
            raise Problems(twice)
        cfg = yaml.safe_load(text) or {}
    except UnicodeDecodeError as e:
        raise OpcostError(f"config {path}", f"not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}): "
                                            "save it as UTF-8") from None
    except (OSError, yaml.YAMLError) as e:
        raise OpcostError(f"config {path}", str(e)) from None
    return validate(cfg)


def section(cls, cfg: dict | None):
    """A settings dataclass from a (validated) config section: known keys taken, the rest left at defaults."""
    cfg = dict(cfg or {})
    return cls(**{k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg})


WORKLOAD_KINDS = ("models", "sweeps", "predict_only")


def workloads(config: dict, kind: str = "models") -> list[tuple[str, str, int]]:
    """(model, mode, batch) for every workload of one ``kind``, in config order: ``models`` (profiled and
    validated end to end), ``sweeps`` (sweep points, profiled only; :mod:`opcost.model.sweeps`) or ``predict_only``
    (timed end to end and predicted from the database, never profiled). Mode ``decode`` is a workload per context
    length of ``context_lens`` (the entry's, else the config's): ``decode<L>``; mode ``prefill`` one per prompt
    length of the same: ``prefill<P>``."""
    from opcost.model.modes import decode_mode, prefill_mode

    per_length = {"decode": decode_mode, "prefill": prefill_mode}

    if kind not in WORKLOAD_KINDS:
        raise ValueError(f"workload kind {kind!r}: one of {', '.join(WORKLOAD_KINDS)}")
    out = []
    for name, entry in config["models"].items():
        own = ("sweeps" if is_sweep(entry) else "predict_only" if name in config.get("predict_only", {})
               else "models")
        if own != kind:
            continue
        contexts = entry.get("context_lens") or config.get("context_lens") or [128]
        modes = [m for given in entry.get("modes") or config["modes"]
                 for m in ([per_length[given](n) for n in contexts] if given in per_length else [given])]
        for mode in dict.fromkeys(modes):  # decode at context 512 and decode512: one workload
            for batch in entry.get("batch_sizes") or config["batch_sizes"]:
                out.append((name, mode, int(batch)))
    return out


def generate_questions(config: dict) -> list[tuple[str, int, int, int]]:
    """(model, batch, prompt, new) of every generate() question of the config's ``generate`` section: each model with
    a decode or prefill mode, at each of its batch sizes, each prompt length and new-token count; none unless both
    lists are given."""
    from opcost.model.modes import is_generation

    ask = config.get("generate") or {}
    prompts, news = ask.get("prompts") or [], ask.get("new_tokens") or []
    models = dict.fromkeys((m, b) for m, mode, b in workloads(config) if is_generation(mode))
    return [(m, b, int(p), int(n)) for m, b in models for p in prompts for n in news]


# What shapes each stage's output: the config keys it reads (``section.setting``: that one setting of a section). A
# rule declares this slice (``params``), so that a changed key reruns exactly the jobs it affects and an unchanged
# config reruns nothing.
_HOST = ("device", "dtype", "threads", "affinity")
_PLACED = ("placement.tiers", "placement.on_missing", "placement.params")  # where a placement puts what
STAGE_KEYS: dict[str, tuple[str, ...]] = {
    "extract": ("device", "dtype"),
    "sweeps": ("device", "dtype", "sweeps", "batch_sizes", "modes"),
    "placement_tiers": ("device", "placement.tiers", "placement.on_missing"),
    # of the loop, only the first iteration's types: the stopping rule (target, iterations) is the evaluation's;
    # of the placement, all but `simultaneous` (the coplace stage's)
    "profile": (*_HOST, "models", "profile", *_PLACED, "placement.max_per_config", "loop.initial_op_types", "energy"),
    "e2e": (*_HOST, "e2e", "energy"),
    "e2e_tier": (*_HOST, "e2e.timing", *_PLACED),  # a whole model on a tier: its timing and where its tensors go
    "insitu": (*_HOST, "insitu"),
    # the profiling's own conditions, all but how its configurations are split into jobs
    "alone": (*_HOST, *(f"profile.{k}" for k in ("timing", "cache", "order", "rotation_size", "e2e_every", "remeasure",
                                                 "visits"))),
    "trace": (*_HOST, "trace", "profile.e2e_every"),  # the glue is timed against the rotation's rounds
    "coplace": (*_HOST, "placement", "insitu"),
    "evaluate": ("device", "statistic", "loop"),
    "validate": ("device", "statistic"),
    "unseen": ("device", "dtype", "statistic", "threads", "predict_only"),  # predict_only: each one's own trace
    # the questions themselves are the rule's params (opcost.config.generate_questions); e2e: how generate() is timed
    "generate": (*_HOST, "statistic", "models", "generate", "e2e"),
    "figures": ("device", "dtype", "statistic", "threads", "affinity", "models"),  # models, dtype: decode steps
    "advise": ("device", "dtype", "statistic", "models", "placement", "advise"),
}
# a model entry's keys that only choose workloads (new workloads are new jobs; existing ones are unaffected)
_WORKLOAD_CHOICE = ("batch_sizes", "modes", "context_lens")


# each gets its model's entry
PER_WORKLOAD_STAGES = ("extract", "e2e", "e2e_tier", "alone", "insitu", "trace", "coplace")


def model_entry(config: dict, model: str) -> dict:
    """What of ``models.<model>`` shapes the model's operators and inputs (its entry without batch sizes and modes)."""
    return {k: v for k, v in config["models"][model].items() if k not in _WORKLOAD_CHOICE}


NEVER_PROFILED = "never_profiled"  # a per-workload stage's params: its model is a `predict_only` one
CONTROLLED_BY = "controls"  # a `predict_only` model's e2e params: mode -> its controls (:func:`controls`)
CODE = "code"  # a stage's params: model -> a fingerprint of the module file its `module:callable` entry names


def code_fingerprint(entry: dict) -> str | None:
    """The SHA-1 (12 digits) of the file of the module a ``module:callable`` entry names, found without importing it,
    so that an edit of the model's code reruns its jobs (the modules it imports not followed); else None."""
    import hashlib
    import importlib.util

    if ":" not in (target := str(entry.get("model") or "")) or target.split(":")[0] in ("hf", "timm", "torchvision"):
        return None
    try:
        origin = importlib.util.find_spec(target.split(":")[0]).origin
        return hashlib.sha1(Path(origin).read_bytes()).hexdigest()[:12]
    except (ImportError, AttributeError, ValueError, TypeError, OSError):
        return None


def stage_settings(config: dict, stage: str, model: str | None = None) -> str:
    """The slice of ``config`` that shapes ``stage``'s output (for a per-workload stage, also the model's entry),
    as JSON: a rule's ``params``, so that Snakemake reruns the job when, and only when, it changes. Keys keep the
    config's order, which can matter (the first of ``placement.tiers`` is the fast tier): the stage reads this very
    text back (:class:`StageConfig`)."""
    import json

    part: dict = {}
    for key in STAGE_KEYS[stage]:
        top, _, setting = key.partition(".")
        if top in config and not setting:
            part[top] = config[top]
        elif top in config and setting in config[top]:  # one setting of a section: the others change nothing here
            part.setdefault(top, {})[setting] = config[top][setting]
    if "models" in part:  # the predict_only entries shape only the stages that declare `predict_only`
        skip = set() if "predict_only" in STAGE_KEYS[stage] else set(config.get("predict_only") or {})
        part["models"] = {m: _canonical(model_entry(config, m)) for m in sorted(config["models"]) if m not in skip}
    if model is not None:
        part["model"] = _canonical(model_entry(config, model))
        if model in (config.get("predict_only") or {}):  # never profiled: no plain process to compare
            part[NEVER_PROFILED] = True
            if stage == "e2e":  # timed in turn with the profiled controls: their entries rerun it
                part[CONTROLLED_BY] = controls(config)
    named = [model] if model is not None else list(part.get("models") or {})
    if code := {m: f for m in named if (f := code_fingerprint(config["models"][m]))}:
        part[CODE] = code
    return json.dumps(part, separators=(",", ":"), default=str)


CONTROLS = 2  # profiled models a never-profiled workload is timed in turn with (opcost.measure.control)


def controls(config: dict) -> dict[str, list]:
    """mode -> [[model, entry, batch], ...]: the controls a never-profiled workload of that mode is timed in turn with
    (:mod:`opcost.measure.control`), the first :data:`CONTROLS` profiled models with the mode in config order, each
    at its smallest batch."""
    smallest: dict[tuple[str, str], int] = {}
    for name, mode, batch in workloads(config):
        smallest[(mode, name)] = min(int(batch), smallest.get((mode, name), int(batch)))
    out: dict[str, list] = {}
    for (mode, name), batch in smallest.items():
        if len(out.setdefault(mode, [])) < CONTROLS:
            out[mode].append([name, _canonical(model_entry(config, name)), batch])
    return out


def _canonical(entry):
    """A model entry with its mappings' keys sorted: the same entry written in another key order is the same
    params (the order of ``placement.tiers``, which says the fast tier, is left alone: it is not a model entry)."""
    if isinstance(entry, dict):
        return {k: _canonical(entry[k]) for k in sorted(entry, key=str)}
    if isinstance(entry, list):
        return [_canonical(v) for v in entry]
    return entry


class UndeclaredKey(OpcostError):
    """A stage read a config key outside its rule's params: a bug, never a workload's failure (the job fails)."""


class StageConfig(Mapping):
    """The config a stage may read: its rule's params (:func:`stage_settings`), nothing else. Reading, testing or
    getting another top-level key raises :class:`UndeclaredKey`, so that no config change can leave a stage's
    result stale (Snakemake reruns a job only when its params change). A per-workload stage's ``models`` holds its
    own model's entry."""

    def __init__(self, stage: str, part: dict, model: str | None = None):
        part = dict(part)
        self.never_profiled = bool(part.pop(NEVER_PROFILED, False))  # its model is a `predict_only` one
        self.controls = part.pop(CONTROLLED_BY, {})  # e2e of a `predict_only` model: mode -> its controls
        part.pop(CODE, None)  # what reruns the job when the model's code changes: nothing a stage reads
        own = part.pop("model", None)
        if own is not None and "models" not in part:
            part["models"] = {model: own}
        self.stage, self._part = stage, part
        self._declared = {k.partition(".")[0] for k in STAGE_KEYS[stage]} | ({"models"} if own is not None else set())
        whole = {k for k in STAGE_KEYS[stage] if "." not in k}
        self._settings: dict[str, set] = {}  # a section declared by some of its settings only: those settings
        for key in STAGE_KEYS[stage]:
            top, _, setting = key.partition(".")
            if setting and top not in whole:
                self._settings.setdefault(top, set()).add(setting)

    @classmethod
    def from_params(cls, stage: str, params: str, model: str | None = None) -> "StageConfig":
        """From a rule's params string (:func:`stage_settings`, followed by the job's run mark)."""
        import json

        part, _ = json.JSONDecoder().raw_decode(params)
        return cls(stage, part, model)

    @classmethod
    def of(cls, config: dict, stage: str, model: str | None = None) -> "StageConfig":
        """What the rule's params give the stage, from a validated ``config`` (the same JSON round trip)."""
        return cls.from_params(stage, stage_settings(config, stage, model), model)

    def _check(self, key) -> None:
        if key not in self._declared:
            raise UndeclaredKey(f"stage {self.stage}", f"reads config key {key!r}, which is not in its rule's params: "
                                                       "add it to opcost.config.STAGE_KEYS")

    def _section(self, key, value):
        """``value`` of top-level ``key``; a section declared by some of its settings only, as a
        :class:`StageConfig` of those settings (reading another one of its settings raises, too)."""
        if key not in self._settings or not isinstance(value, dict):
            return value
        section = StageConfig.__new__(StageConfig)
        section.stage, section._part, section._settings = f"{self.stage} ({key})", value, {}
        section._declared = self._settings[key]
        return section

    def __getitem__(self, key):
        self._check(key)
        return self._section(key, self._part[key])

    def __contains__(self, key) -> bool:
        self._check(key)
        return key in self._part

    def get(self, key, default=None):
        self._check(key)
        return self._section(key, self._part.get(key, default))

    def __iter__(self):
        return iter(self._part)

    def __len__(self) -> int:
        return len(self._part)
