rule coplace:
    """Every placement of every leaf-module call of one inference workload, measured co-placed in a few model runs
    (simultaneous placement profiling); skipped with a reason in the summary for training or fewer than two tiers."""
    input:
        tier_check=get_tier_check,
    output:
        table="results/coplace/{model}/{mode}_b{batch}.parquet",
        summary="results/coplace/{model}/{mode}_b{batch}.summary.json",
        failures="results/failures/coplace/{model}/{mode}_b{batch}.parquet",
    params:
        settings=settings_of("coplace"),
    log:
        "logs/coplace/{model}/{mode}_b{batch}.log",
    threads: config["threads"]
    resources:
        measure=MEASURE_ALONE,
    conda:
        ENV
    script:
        "../../scripts/coplace.py"
