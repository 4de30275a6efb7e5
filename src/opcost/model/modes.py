"""Workload modes, without torch (the workflow reads them as it parses the config).

``inference`` and ``training`` are one iteration of a model (:mod:`opcost.model.workload`); ``decode<L>`` (e.g.
``decode512``) is one generation step of a decoder: one new token per sequence over a key/value cache of L tokens;
``prefill<P>`` is ``generate()``'s first call: a prompt of P tokens per sequence into an empty key/value cache, the
logits of the last token alone. The context (prompt) length is part of the mode, so that every table, file name
and wildcard keyed by ``model/mode/b{batch}`` holds these workloads as they are. A config's mode ``decode`` stands
for ``decode<L>`` at each of its ``context_lens`` (:func:`opcost.config.workloads`), ``prefill`` for ``prefill<P>``
at each of them.
"""
from __future__ import annotations

import re

from opcost.errors import OpcostError

MODES = ("inference", "training", "decode")  # a workload's decode mode names its context length: decode<L>
_DECODE = re.compile(r"decode([1-9][0-9]*)")
_PREFILL = re.compile(r"prefill([1-9][0-9]*)")


def decode_context(mode: str) -> int | None:
    """The context length L of a ``decode<L>`` mode; None for any other mode."""
    m = _DECODE.fullmatch(str(mode))
    return int(m.group(1)) if m else None


def is_decode(mode: str) -> bool:
    """Whether ``mode`` is a decode step (``decode<L>``)."""
    return decode_context(mode) is not None


def decode_mode(context: int) -> str:
    """The mode of a decode step at context length ``context``."""
    if int(context) < 1:
        raise OpcostError(f"context length {context}", "a decode step needs at least one cached token")
    return f"decode{int(context)}"


def prefill_length(mode: str) -> int | None:
    """The prompt length P of a ``prefill<P>`` mode; None for any other mode."""
    m = _PREFILL.fullmatch(str(mode))
    return int(m.group(1)) if m else None


def prefill_mode(prompt: int) -> str:
    """The mode of ``generate()``'s prefill of a prompt of ``prompt`` tokens."""
    if int(prompt) < 1:
        raise OpcostError(f"prompt length {prompt}", "a prefill needs at least one token")
    return f"prefill{int(prompt)}"


def is_generation(mode: str) -> bool:
    """Whether ``mode`` is a part of ``generate()``: a prefill or a decode step (a transformers decoder's)."""
    return is_decode(mode) or prefill_length(mode) is not None


def op_mode(mode: str) -> str:
    """The mode the operator configurations of a workload of ``mode`` run in: ``training``, or ``inference`` for an
    inference pass, a prefill and a decode step (their operators are inference operators, the lengths in their
    shapes), so that their configurations are those of inference, shared across lengths and measured, catalogued and
    estimated as such."""
    return "inference" if is_generation(mode) else mode


def check_mode(mode: str, model: str = "model") -> str:
    """``mode`` when a workload can run in it (inference, training, decode<L>, prefill<P>), else a one-line error."""
    if mode in ("inference", "training") or is_generation(mode):
        return mode
    raise OpcostError(f"model {model}", f"unknown mode {mode!r} (expected inference, training, decode<L>: a "
                                        "decode step at context length L, e.g. decode512, or prefill<P>: generate()'s "
                                        "prefill of a P-token prompt)")
