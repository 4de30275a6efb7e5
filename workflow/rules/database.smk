rule database:
    """Measurement shards merged into the Parquet database under results/db/, with the overhead between operators
    that each workload's trace models."""
    input:
        measurements=get_profile_chunks,
        insitu=get_insitu_tables,
        alone=get_alone_tables,
        coplace=get_coplace("table"),
        insitu_e2e=get_insitu_e2e_tables,
        e2e=get_e2e_tables,
        tier_e2e=get_tier_e2e_tables,
        profile_e2e=get_profile_e2e,
        layers=lambda w: get_layer_tables() + get_sweep_layers(),
        overheads=get_trace_tables("overheads"),
        op_types=get_trace_tables("op_types"),
    output:
        measurements="results/db/measurements.parquet",
        e2e="results/db/e2e.parquet",
        layers="results/db/layers.parquet",
        overheads="results/db/overheads.parquet",
    params:
        mark=run_mark("database"),  # a job that failed is redone
    log:
        "logs/database.log",
    resources:
        measure=MEASURE_SHARED,
    conda:
        ENV
    script:
        "../../scripts/database.py"


rule failures:
    """Every failure of the run, one line each: workloads a stage could not build or run, configurations that could
    not be replayed or timed (the run went on without them)."""
    input:
        failures=get_failure_tables,
        measurements="results/db/measurements.parquet",
        layers="results/db/layers.parquet",
    output:
        "results/failures.tsv",
    params:
        mark=run_mark("failures"),  # a job that failed is redone
    log:
        "logs/failures.log",
    resources:
        measure=MEASURE_SHARED,
    conda:
        ENV
    script:
        "../../scripts/failures.py"
