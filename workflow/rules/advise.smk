rule advise:
    """Where each tensor should live under the config's fast-memory budgets (`advise.budgets`): per workload, the
    placement of least predicted time (an integer program) beside the greedy and first-touch ones, from the
    database's placement measurements. Nothing is measured: seconds."""
    input:
        layers="results/db/layers.parquet",
        measurements="results/db/measurements.parquet",
        e2e="results/db/e2e.parquet",
        overheads="results/db/overheads.parquet",
    output:
        plans=per_workload("results/advise/{model}/{mode}_b{batch}.yaml"),
        figure=report(
            "results/advise/advise.png",
            caption="../report/advise.rst",
            category="Figures",
        ),
    params:
        settings=settings_of("advise"),
    log:
        "logs/advise.log",
    resources:
        measure=MEASURE_SHARED,
    conda:
        ENV
    script:
        "../../scripts/advise.py"
