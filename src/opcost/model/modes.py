"""Workload modes, without torch (the workflow reads them as it parses the config).

``inference`` and ``training`` are one iteration of a model (:mod:`opcost.model.workload`); ``decode<L>`` (e.g.
``decode512``) is one generation step of a decoder: one new token per sequence over a key/value cache of L tokens.
The context length is part of the mode, so that every table, file name and wildcard keyed by
``model/mode/b{batch}`` holds decode workloads as they are. A config's mode ``decode`` stands for ``decode<L>`` at
each of its ``context_lens`` (:func:`opcost.config.workloads`).
"""
from __future__ import annotations

import re

from opcost.errors import OpcostError

MODES = ("inference", "training", "decode")  # a workload's decode mode names its context length: decode<L>
_DECODE = re.compile(r"decode([1-9][0-9]*)")


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


def op_mode(mode: str) -> str:
    """The mode the operator configurations of a workload of ``mode`` run in: ``training``, or ``inference`` for an
    inference pass and a decode step (its operators are inference operators, the context length in their shapes),
    so that a decode step's configurations are those of inference, shared across context lengths and measured,
    catalogued and estimated as such."""
    return "inference" if is_decode(mode) else mode


def check_mode(mode: str, model: str = "model") -> str:
    """``mode`` when a workload can run in it (inference, training, decode<L>), else a one-line error."""
    if mode in ("inference", "training") or is_decode(mode):
        return mode
    raise OpcostError(f"model {model}", f"unknown mode {mode!r} (expected inference, training, or decode<L>: a "
                                        "decode step at context length L, e.g. decode512)")
