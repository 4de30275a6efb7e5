"""One function per workflow stage: what a Snakemake rule's script (and the ``opcost`` CLI) calls.

Each takes its rule's slice of the config (:class:`opcost.config.StageConfig`: the keys of the rule's params, so that
a changed key reruns the jobs it shapes; the CLI passes a whole validated config) and paths, reads its inputs, and
writes its outputs atomically. The measuring stages are in :mod:`opcost.stages.measuring`, the analysing ones in
:mod:`opcost.stages.analysing`; every stage is reached as ``opcost.stages.<name>``.
"""
from opcost.stages.analysing import (
    EvaluationFiles,
    ValidationFiles,
    ValidationOutputs,
    advise,
    database,
    decode_curves,
    evaluate,
    failures,
    loop_summary,
    make_figures,
    predict_unseen,
    validate,
    validate_generate,
)
from opcost.stages.measuring import (
    TRACE_PARTS,
    alone,
    coplace,
    e2e,
    e2e_tier,
    extract,
    extract_sweeps,
    insitu,
    make_catalog,
    placement_tiers,
    profile,
    trace,
)


__all__ = [
    "EvaluationFiles", "ValidationFiles", "ValidationOutputs", "advise", "database", "decode_curves", "evaluate",
    "failures", "loop_summary", "make_figures", "predict_unseen", "validate", "validate_generate", "TRACE_PARTS",
    "alone", "coplace", "e2e", "e2e_tier", "extract", "extract_sweeps", "insitu", "make_catalog", "placement_tiers",
    "profile", "trace",
]
