"""What can be known to be wrong with a validated config before the first job, all of it at once.

:func:`problems` lists, one line each (culprit first): models whose source does not resolve (a torchvision, timm or
transformers name that does not exist, a ``module:callable`` that cannot be imported, a kwarg the transformers config
or a torchvision or built-in constructor lacks, a transformers setting of the wrong type or below zero), timm and
transformers models whose parameters alone exceed the memory free, a batch whose inputs alone cannot be allocated, an
``input_range`` whose low end is not below its high end, ``input_dtype`` or ``input_range`` where the source's own
inputs ignore them, ``channels_last`` for inputs that hold no image, a transformers model's ``seq_len`` past its
learned positions, model names too long to name a file on this file system, ``device: cuda`` on a host where torch
finds no such device, a model in mode ``decode`` or ``prefill`` that is no transformers decoder or a context it cannot
take (past its learned positions, a key/value cache beyond the memory free, a prefill of minutes: arithmetic on its
config, never a prefill), a batch at which one activation alone cannot fit (a forward pass at batches 1 and 2 bounds
it), and an operator type of ``loop.initial_op_types`` misspelt. What only running a model shows (a constructor or
forward pass that raises) is left to the run, which isolates and reports it.

Checks that need torch cost seconds (the import); a model entry that passed is remembered under ``cache_dir``
(keyed by the entry, device, dtype, batch sizes and library versions), so that a rerun of the same config does
not pay them again. The workflow starts them (:func:`start`) in a process of its own as it parses, and waits for
them before its first job (``onstart``), so that Snakemake builds its DAG meanwhile (a dry run of 100,000
configurations: the import was 3.7 of its 16.6 s); a dry run reports them as it exits.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from importlib import metadata
from pathlib import Path

from opcost import host_check
from opcost.config import generate_questions
from opcost.errors import OpcostError, Problems
from opcost.host_check import ITEMSIZE, batches, input_bytes

DEFAULT_SHAPES = [[3, 224, 224]]  # as opcost.model.sources.load_model


def name_max(where=".") -> int:
    """The longest file name (bytes) the file system holding ``where`` accepts (255 where it does not say)."""
    try:
        return int(os.pathconf(where, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def _name_problems(config: dict, where) -> list[str]:
    limit = name_max(where)
    return [f"config: models.{name[:40]}...: a model name of {len(name.encode())} bytes names directories of "
            f"results/, longer than this file system's {limit}-byte limit: shorten it"
            for name in config["models"] if len(name.encode()) > limit]


def _entry_problems(name: str, entry: dict, config: dict) -> list[str]:
    """What is wrong with one model entry, cheapest checks first; the source is checked only when they pass."""
    return (_input_problems(name, entry, config) or _source_problems(name, entry, config)
            or _sequence_problems(name, entry, config) or _decode_problems(name, entry, config)
            or _activation_problems(name, entry, config))


def _input_problems(name: str, entry: dict, config: dict) -> list[str]:
    """An ``input_range`` whose low end is not below its high end; ``input_dtype`` or ``input_range`` for a
    library's own inputs (which ignore them); ``channels_last`` or ``token_major`` for inputs that hold no image;
    ``seq_len`` for a model that is no transformers one; a batch whose inputs alone exceed the memory free."""
    lo_hi, shapes, target = entry.get("input_range"), entry.get("input_shapes"), entry.get("model") or name
    if lo_hi is not None and lo_hi[0] >= lo_hi[1]:
        return [f"config: models.{name}.input_range: {lo_hi} draws integers from [low, high): low must be below "
                "high"]
    if shapes == []:
        return [f"config: models.{name}.input_shapes: [] lists no input: give each input's per-sample shape, or "
                "remove the key for the source's own inputs"]
    drawn = [k for k in ("input_dtype", "input_range") if entry.get(k) is not None]
    if drawn and not shapes and target.startswith(("hf:", "timm:")):
        return [f"config: models.{name}.{drawn[0]}: applies to inputs drawn at input_shapes, and {target} has no "
                "input_shapes (its library's own inputs are used: token ids below its vocabulary, images of its "
                f"size): add input_shapes, or remove {' and '.join(drawn)}"]
    layout = entry.get("memory_format")
    if layout in ("channels_last", "token_major") and shapes and not any(len(s) == 3 for s in shapes):
        return [f"config: models.{name}.memory_format: {layout} orders images [channels, height, width]"
                f"{' and 4-D weights' if layout == 'channels_last' else ''}; its input_shapes {shapes} hold no "
                "image: remove memory_format"]
    if entry.get("seq_len") is not None and not target.startswith("hf:"):
        return [f"config: models.{name}.seq_len: sets the token ids of a transformers (hf:) model, and {target} is "
                "none: remove seq_len, or give input_shapes"]
    from opcost.model.sources import available_memory

    free = available_memory("cpu")
    for batch in batches(config, entry):
        need = input_bytes(entry, batch, config["dtype"])
        if free is not None and need is not None and need > free:
            return [f"model {name}: batch {batch} needs {need / 1e9:.3g} GB for its inputs alone, more than the "
                    f"{free / 1e9:.1f} GB free: use a smaller batch size"]
    return []


def _source_problems(name: str, entry: dict, config: dict) -> list[str]:
    """A source that does not resolve or whose parameters exceed the memory free
    (:func:`opcost.model.sources.check_source`)."""
    from opcost.model.sources import check_source

    try:
        check_source(name, entry, str(config["device"]))
    except OpcostError as e:
        return [str(e)]
    return []


def workload_problems(name: str, entry: dict, mode: str, batch: int, config: dict) -> list[str]:
    """What a config alone says is wrong with one workload of model ``name`` (``entry``: its config entry, ``{}``
    for a name alone) at ``batch`` in ``mode`` on ``config``'s device and dtype, as a config's entries are checked
    (for ``opcost predict``, which extracts a workload no config listed)."""
    entry = {k: v for k, v in entry.items() if k not in ("modes", "batch_sizes")}
    return _entry_problems(name, entry, {**config, "models": {name: entry}, "modes": [mode], "batch_sizes": [batch]})


MAX_CHECK_PARAMS = 300_000_000  # a model built and run once at batches 1 and 2 to bound its activations, up to this


def per_sample_activation(name: str, entry: dict, dtype: str = "float32") -> int | None:
    """Bytes per sample of the largest tensor a leaf module of the model outputs, from one forward pass at batch 1
    and one at batch 2 (what grows with the batch); None for a transformers model, one larger than
    :data:`MAX_CHECK_PARAMS` parameters, or one that does not build or run (the run reports that)."""
    if (entry.get("model") or name).startswith("hf:"):
        return None
    import torch

    from opcost.model.sources import load_model

    try:
        loaded = load_model(name, entry, "cpu", dtype)
        if sum(p.numel() for p in loaded.module.parameters()) > MAX_CHECK_PARAMS:
            return None
        sizes: list[int] = []

        def record(module, args, out):
            sizes.append(sum(t.numel() * t.element_size() for t in (out if isinstance(out, (tuple, list)) else [out])
                             if isinstance(t, torch.Tensor)))

        leaves = [m for m in loaded.module.modules() if not any(True for _ in m.children())]
        handles = [m.register_forward_hook(record) for m in leaves]
        runs = []
        try:
            with torch.no_grad():
                for batch in (1, 2):
                    sizes.clear()
                    loaded.module(*loaded.make_inputs(batch))
                    runs.append(list(sizes))
        finally:
            for h in handles:
                h.remove()
    except Exception:  # a model that does not build or run here: the run isolates and reports it
        return None
    one, two = runs
    return max((b - a for a, b in zip(one, two)), default=0) if len(one) == len(two) else None


def _activation_problems(name: str, entry: dict, config: dict) -> list[str]:
    """A batch at which one activation of the model alone cannot fit in the memory free (a bound from below)."""
    from opcost.model.sources import available_memory

    asked = batches(config, entry)
    free = available_memory(str(config["device"]))
    if free is None or max(asked) < 2:
        return []
    per_sample = per_sample_activation(name, entry, config["dtype"])
    for batch in asked:
        if per_sample and per_sample * batch > free:
            return [f"model {name}: batch {batch} needs at least {per_sample * batch / 1e9:.3g} GB for one "
                    f"activation ({per_sample / 1e6:.3g} MB a sample), more than the {free / 1e9:.1f} GB free: use a "
                    "smaller batch size"]
    return []


def _modes(config: dict, entry: dict) -> list[str]:
    return list(entry.get("modes") or config["modes"])


def _decode_problems(name: str, entry: dict, config: dict) -> list[str]:
    """A model with a decode mode that is no decoder a key/value cache can be stepped through (only transformers
    decoders are: :func:`opcost.model.sources.hf_models.decoder_problem`)."""
    mode = next((m for m in _modes(config, entry) if m.startswith(("decode", "prefill"))), None)
    if mode is None:
        return []
    target = entry.get("model") or name
    what = "steps a key/value cache" if mode.startswith("decode") else "fills a key/value cache (generate()'s prefill)"
    if not target.startswith("hf:"):
        return [f"model {name}: mode {mode} {what}, which only transformers decoders do "
                f"(hf:gpt2, hf:llama...); {target} is none"]
    from opcost.model.sources import hf_models

    why = hf_models.decoder_problem(target.removeprefix("hf:"), entry)
    if why is not None:
        return [f"model {name}: mode {mode} {what}: {target}: {why}"]
    if any(m == name for m, *_ in generate_questions(config)):
        why = hf_models.generate_problem(target.removeprefix("hf:"), entry)
        if why is not None:
            return [f"model {name}: config generate: {why}"]
    return _context_problems(name, entry, config, hf_models.sequence_limits(target.removeprefix("hf:"), entry))


def _sequence_problems(name: str, entry: dict, config: dict) -> list[str]:
    """A transformers model's ``seq_len`` (its inference and training workloads' tokens per sample) past its learned
    positions, known from its config without building it."""
    target = entry.get("model") or name
    if not target.startswith("hf:") or not any(m in ("inference", "training") for m in _modes(config, entry)):
        return []
    from opcost.model.sources import hf_models

    seq = int(entry.get("seq_len") or hf_models.DEFAULT_SEQ_LEN)
    positions = hf_models.sequence_limits(target.removeprefix("hf:"), entry)["positions"]
    if positions is not None and seq > positions:
        return [f"model {name}: seq_len {seq}: {target} has {positions} learned positions, so a sequence takes at "
                f"most {positions} tokens: use seq_len {positions} or less, or more positions in its kwargs"]
    return []


def _length(mode: str) -> int | None:
    """The context length of a decode<L> mode, the prompt length of a prefill<P> mode; None for any other."""
    from opcost.model.modes import decode_context, prefill_length

    return decode_context(mode) or prefill_length(mode)


PREFILL_RATE = {"cpu": 1e12, "cuda": 1e15}  # FLOP/s above any host's of the kind: a prefill's time bound from below
PREFILL_LIMIT_S = 120.0  # a context whose prefill alone takes longer is refused before the first job


def _context_problems(name: str, entry: dict, config: dict, limits: dict) -> list[str]:
    """Contexts a decoder cannot take or this host cannot hold, by arithmetic on its config (never a prefill): past
    its learned positions, a key/value cache larger than the memory free, a prefill that takes over
    :data:`PREFILL_LIMIT_S` even at :data:`PREFILL_RATE`."""
    from opcost.model.sources import available_memory

    contexts = [int(c) for c in entry.get("context_lens") or config.get("context_lens") or [128]]
    contexts += [n for n in map(_length, _modes(config, entry)) if n is not None]
    asked = [p + n - 1 for m, _, p, n in generate_questions(config) if m == name]  # generate()'s last step
    longest, batch = max(contexts + asked), max(batches(config, entry))
    fix = ("use a shorter prompt or fewer new tokens (generate.prompts, generate.new_tokens)"
           if asked and max(asked) == longest and longest > max(contexts)
           else "use a shorter context (context_lens; --context)")
    if limits["positions"] is not None and longest + 1 > limits["positions"]:
        return [f"model {name}: context {longest}: the model has {limits['positions']} learned positions, and a step "
                f"at context {longest} takes position {longest + 1}: {fix}, or more positions in its kwargs"]
    device = str(config["device"])
    free = available_memory(device)
    if limits["kv_elements"] and free is not None:
        need = limits["kv_elements"] * longest * batch * ITEMSIZE.get(config["dtype"], 4)
        if need > free:
            return [f"model {name}: context {longest} at batch {batch}: its key/value cache needs {need / 1e9:.3g} "
                    f"GB, more than the {free / 1e9:.1f} GB free: {fix} or a smaller batch"]
    if limits["params"] and limits["attention"]:
        flops = batch * (limits["params"] * longest + limits["attention"] * longest * longest / 2)
        rate = PREFILL_RATE["cuda" if device.startswith("cuda") else "cpu"]
        if flops / rate > PREFILL_LIMIT_S:
            return [f"model {name}: context {longest} at batch {batch}: its prefill alone is {flops:.2g} FLOPs, over "
                    f"{flops / rate / 60:.0f} minutes even at {rate:.0e} FLOP/s: {fix}"]
    return []


@functools.lru_cache(maxsize=1)
def _versions() -> dict:
    """The versions of the packages that build models (part of each entry's cache key), read once per process."""
    found = {}
    for pkg in ("torch", "torchvision", "timm", "transformers"):
        try:
            found[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            found[pkg] = None
    return found


def _key(name: str | None, entry: dict, config: dict, questions_of: str | None = None) -> str:
    """What a model entry's checks depend on; without ``name``, for the entry under any name (its `generate`
    questions those of ``questions_of``)."""
    of = name if questions_of is None else questions_of
    what = [name, entry, config["device"], config["dtype"], batches(config, entry), _versions(), os.getcwd(),
            *(["decode"] if any(m.startswith(("decode", "prefill")) for m in _modes(config, entry)) else []),
            *[q[1:] for q in generate_questions(config) if q[0] == of]]
    return hashlib.sha1(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _op_type_problems(config: dict) -> list[str]:
    """``loop.initial_op_types`` names that are no operator type but one letter or two from one of PyTorch's (a
    module class of ``torch.nn`` or an aten op): a typo, which would leave the first iteration without that type.
    Other names (a model's own module classes) are known only once the models are extracted."""
    names = [t for t in (config.get("loop") or {}).get("initial_op_types") or [] if t != "all"]
    if not names:
        return []
    import difflib

    import torch

    known = {n for n in dir(torch.nn) if isinstance(getattr(torch.nn, n, None), type)} | set(dir(torch.ops.aten))
    out = []
    for name in names:
        close = [] if name in known else difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        if close:
            out.append(f"config: loop.initial_op_types: {name!r} is no operator type: did you mean {close[0]!r}?")
    return out


def _sweeps_key(config: dict) -> str:
    """The sweep points' memory check, remembered per points, dtype, device and batches (not per memory free)."""
    from opcost.config import is_sweep

    points = {n: [e, batches(config, e)] for n, e in config["models"].items() if is_sweep(e)}
    what = [points, config["dtype"], str(config["device"]), _versions()]
    return "sweeps-" + hashlib.sha1(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _op_types_key(config: dict) -> str:
    names = (config.get("loop") or {}).get("initial_op_types") or []
    return "op_types-" + hashlib.sha1(json.dumps([names, _versions()], default=str).encode()).hexdigest()[:16]


def problems(config: dict, cache_dir=None, where=".") -> list[str]:
    """Every problem of a validated ``config`` that can be found without running a model, one line each (empty: none
    found). ``cache_dir``: where model entries that passed are remembered; ``where``: a path on the file system
    results are written to."""
    from opcost.config import is_sweep

    out = _name_problems(config, where) + host_check.problems(config)
    cache = Path(cache_dir) if cache_dir is not None else None
    out += _remembered(cache, lambda: _op_types_key(config), lambda: _op_type_problems(config))
    out += _remembered(cache, lambda: _sweeps_key(config), lambda: host_check.sweep_problems(config))
    passed: set[str] = set()  # entries that passed, but for their names: another name for one is not built again
    for name, entry in config["models"].items():
        if is_sweep(entry):  # a sweep point is generated by opcost: nothing of the user's to check
            continue
        alike = _key(None, entry, config, name)
        if alike in passed:
            continue
        found = _remembered(cache, lambda: _key(name, entry, config), lambda: _entry_problems(name, entry, config))
        out += found
        if not found:
            passed.add(alike)
    return out


def _remembered(cache: Path | None, key, check) -> list[str]:
    """``check()``'s problems, unless a check of the same ``key()`` passed before (remembered under ``cache``: a
    file named by the key, written when it passes)."""
    if cache is not None and (cache / key()).exists():
        return []
    found = check()
    if not found and cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / key()).touch()
    return found


def check(config: dict, cache_dir=None, where=".") -> None:
    """Raise :class:`Problems` listing every problem :func:`problems` finds."""
    found = problems(config, cache_dir, where)
    if found:
        raise Problems(found)


def _needs_import(config: dict, cache_dir) -> bool:
    """Whether :func:`problems` would import torch or a model library (a CUDA device, a model entry not remembered
    under ``cache_dir``)."""
    from opcost.config import is_sweep

    if str(config["device"]).startswith("cuda") or cache_dir is None:
        return True
    if (config.get("placement") or {}).get("on_missing") == "strict":  # every tier checked, GPU ones by torch
        return True
    if not all((Path(cache_dir) / key(config)).exists() for key in (_op_types_key, _sweeps_key)):
        return True
    return any(not (Path(cache_dir) / _key(n, e, config)).exists() for n, e in config["models"].items()
               if not is_sweep(e))


class Pending:
    """:func:`problems` of a config, started by :func:`start`: found already, or being found in a process of its
    own; :meth:`problems` waits for them."""

    def __init__(self, found: list[str] | None = None, proc=None):
        self._found, self._proc = found, proc

    def problems(self) -> list[str]:
        if self._found is None:
            out, err = self._proc.communicate()
            if self._proc.returncode != 0:  # the check itself broke: say so rather than pass silently
                lines = err.strip().splitlines()
                self._found = [f"config: the check before the first job failed: {lines[-1].strip() if lines else '?'}"]
            else:
                self._found = json.loads(out)
        return self._found


def start(config: dict, cache_dir=None, where=".") -> Pending:
    """:func:`problems` of a validated ``config``, started: at once where they need no import (every model entry
    remembered), else in a Python process of its own (a fork of the warm process, :mod:`opcost.warm`, which the
    jobs then find started), so that the caller (Snakemake building its DAG) goes on meanwhile;
    :meth:`Pending.problems` waits for them."""
    import subprocess

    from opcost import warm

    if not _needs_import(config, cache_dir):
        return Pending(problems(config, cache_dir, where))
    request = json.dumps({"config": config, "cache_dir": None if cache_dir is None else str(cache_dir),
                          "where": str(where)}, default=str)
    proc = subprocess.Popen(warm.command("opcost.preflight:_child", str(config.get("device") or "cpu")),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdin.write(request)
    proc.stdin.close()
    proc.stdin = None  # communicate() must not flush a closed pipe
    return Pending(proc=proc)


def _child() -> None:
    """The process :func:`start` runs: the request as JSON on stdin, the problems as a JSON list on stdout."""
    import sys

    req = json.loads(sys.stdin.read())
    print(json.dumps(problems(req["config"], req["cache_dir"], req["where"])))
