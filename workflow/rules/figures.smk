rule figures:
    """All figures, in one directory (see workflow/report/figures.rst), and the run's summary (printed at the end)."""
    input:
        layers=get_layer_tables,
        measurements="results/db/measurements.parquet",
        e2e="results/db/e2e.parquet",
        predictions="results/validation/predictions.parquet",
        consistency="results/validation/consistency.parquet",
        tier_costs="results/validation/tiers.parquet",
        loop="results/loop/summary.json",
        tiers="results/placement/tiers.json",
        failures="results/failures.tsv",
        coplace=get_coplace("summary"),
        trace_op_types=get_trace_tables("op_types"),
        trace_iterations=get_trace_tables("iterations"),
        trace_overhead_samples=get_trace_tables("overhead_samples"),
        unseen=lambda w: ["results/validation/unseen.parquet"] if UNSEEN else [],
        generate=lambda w: ["results/validation/generate.parquet"] if GENERATE else [],
    output:
        report(
            directory("results/figures"),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
        ),
        summary=report("results/summary.txt", caption="../report/summary.rst", category="Summary"),
    params:
        settings=settings_of("figures"),
    log:
        "logs/figures.log",
    resources:
        measure=MEASURE_SHARED,
    conda:
        ENV
    script:
        "../../scripts/figures.py"
