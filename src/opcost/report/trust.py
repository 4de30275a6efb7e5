"""What an answer rests on, and the accuracy to expect of that kind of answer.

The figures are README's accuracy table (benchmarks/accuracy_table.py writes them to ``accuracy.json`` beside this
module, and its ``--check`` keeps them identical): per kind of answer, the median and worst |error| against a plain
process of the user's, opcost's own reference and a dedicated run, the number of cases, and when and where they
were measured. ``opcost predict`` and ``opcost advise`` print one line of it (:func:`expect`).
"""
from __future__ import annotations

import json
from pathlib import Path

FILE = Path(__file__).with_name("accuracy.json")
ESTIMATED = 0.2  # above this share of estimated operator time, an answer is one of a model never profiled


def figures() -> dict:
    """Kind of answer -> its row of the accuracy table (empty where the package lacks the file)."""
    try:
        return json.loads(FILE.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def kind(device: str, mode: str, estimated_share: float, convolutional: bool, tier: str | None = None,
         beyond: float | None = None, attention: bool = False) -> str:
    """The row of the accuracy table that answers for a prediction of ``mode`` on ``device`` whose operator time is
    ``estimated_share`` estimated (``convolutional``: the model has convolutions; ``attention``: it has attention
    and no convolution, a transformer; ``tier``: on a slower memory tier; ``beyond``: a decode step's context over
    the longest its model was measured at). A measured model of neither (an MLP, a DLRM) is answered by the row of
    the benchmark's four models, which holds one."""
    estimated = estimated_share > ESTIMATED
    if tier:
        return "tier"
    if str(device).startswith("cuda"):
        return "gpu_unseen" if estimated else "gpu_measured"
    if mode.startswith("decode"):
        if beyond is not None and beyond > 4:
            return "decode_16x"
        return "decode_4x" if estimated or (beyond is not None and beyond > 1) else "decode_measured"
    if estimated:
        return "unseen_default"
    if mode == "training":
        return "cnn_training"
    return "transformer_small" if attention and not convolutional else "cnn_inference"


# kinds of answer no row of the accuracy table covers, and what to expect of them
UNCOVERED = {"decode_unmeasured": "the database holds no decode step of any model, so this step is estimated from "
                                  "other workloads' operators alone and no figure of the accuracy table covers it: "
                                  "profile a decoder in mode decode first (modes: [decode], context_lens)"}


EXTRAPOLATED = 0.5  # above this share of operator time estimated far past what was measured, no figure covers it


def beyond(share: float, farthest: str | None) -> str | None:
    """One line for an answer of which ``share`` of the operator time is estimated far past anything the database
    measured of its op type (:attr:`opcost.analysis.estimate.Prediction.beyond_share`; ``farthest``: the op type
    farthest off), which no figure of the accuracy table covers; None at or below :data:`EXTRAPOLATED`."""
    if share <= EXTRAPOLATED:
        return None
    return (f"what to expect: {share:.0%} of its operator time is estimated more than 10x past anything this database "
            f"measured of its op type (farthest: {farthest}), which no figure of the accuracy table covers and the "
            "interval may not hold: profile the model, or sweep those shapes (opcost sweep suggest)")


def expect(which: str) -> str:
    """One line: what the accuracy table says of answers of kind ``which`` (a key of :data:`UNCOVERED`: what it
    says of those)."""
    if which in UNCOVERED:
        return f"what to expect: {UNCOVERED[which]}"
    row = figures().get(which)
    if row is None:
        return "what to expect: no figure of the accuracy table for this kind of answer"
    said = [f"{row[ref]} against {name}" for ref, name in (("plain", "your own script"), ("ref", "opcost's reference"),
                                                          ("ded", "a dedicated run")) if row[ref] != "not measured"]
    if not said:
        return f"what to expect ({row['what']}): not measured; take it as a first answer"
    cases = f"{row['n']} cases, " if row.get("n") else ""
    return (f"what to expect ({row['what']}): median |error| {'; '.join(said)} (accuracy table: {cases}"
            f"{row['when']})")
