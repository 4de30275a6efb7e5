checkpoint evaluate:
    """Iteration n of the coverage loop: coverage per workload, and the operator types to add next (or stop)."""
    input:
        unpack(get_evaluate_inputs),
    output:
        "results/loop/iter{n}/evaluation.json",
    params:
        settings=settings_of("evaluate"),
    log:
        "logs/loop/iter{n}.log",
    resources:
        measure=MEASURE_SHARED,
    conda:
        ENV
    script:
        "../../scripts/evaluate.py"


rule loop_summary:
    """The final iteration's verdict and the significant-operator list as a config fragment."""
    input:
        get_all_evaluations,
    output:
        summary="results/loop/summary.json",
        text=report("results/loop/summary.txt", caption="../report/loop.rst", category="Coverage loop"),
        fragment="results/loop/significant_ops.yaml",
    params:
        mark=run_mark("loop_summary"),  # a job that failed is redone
    log:
        "logs/loop/summary.log",
    resources:
        measure=MEASURE_SHARED,
    conda:
        ENV
    script:
        "../../scripts/loop_summary.py"
