"""Configuration: validation against the JSON schema (defaults filled in) and the derived workload list.

The schema (``schemas/config.schema.yaml``, also at ``workflow/schemas/``) is the single definition of every key;
``config/README.md`` documents them. Errors are one line naming the key: ``config: models.x.batch_sizes[0]: ...``.
"""
from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from .errors import OpcostError

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


_Validator = _with_defaults(jsonschema.Draft202012Validator)


def _where(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def validate(config: dict) -> dict:
    """Validate ``config`` in place, filling defaults; raise :class:`OpcostError` naming the first bad key."""
    errors = sorted(_Validator(schema()).iter_errors(config), key=lambda e: (len(e.path), list(map(str, e.path))))
    if errors:
        e = errors[0]
        if e.validator == "additionalProperties":
            extra = sorted(set(e.instance) - set(e.schema.get("properties", {})))
            where = _where(list(e.path) + [extra[0]]) if extra else _where(e.path)
            raise OpcostError(f"config: {where}", "unknown key")
        raise OpcostError(f"config: {_where(e.path)}", e.message)
    return config


def load(path) -> dict:
    try:
        cfg = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise OpcostError(f"config {path}", str(e)) from None
    return validate(cfg)


def section(cls, cfg: dict | None):
    """A settings dataclass from a (validated) config section: known keys taken, the rest left at defaults."""
    cfg = dict(cfg or {})
    return cls(**{k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg})


def workloads(config: dict) -> list[tuple[str, str, int]]:
    """(model, mode, batch) for every workload the config asks for, in config order."""
    out = []
    for name, entry in config["models"].items():
        for mode in entry.get("modes") or config["modes"]:
            for batch in entry.get("batch_sizes") or config["batch_sizes"]:
                out.append((name, mode, int(batch)))
    return out
