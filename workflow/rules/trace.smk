rule trace:
    """Kineto (torch.profiler) trace of one workload's end-to-end iterations and its analysis tables: per op type
    time, op -> kernel table, iteration idle time, CPU overheads T1-T5."""
    input:
        tier_check=get_tier_check,
    output:
        trace="results/trace/{model}/{mode}_b{batch}.json.gz",
        op_types="results/trace/{model}/{mode}_b{batch}.op_types.parquet",
        iterations="results/trace/{model}/{mode}_b{batch}.iterations.parquet",
        op_kernels="results/trace/{model}/{mode}_b{batch}.op_kernels.parquet",
        overheads="results/trace/{model}/{mode}_b{batch}.overheads.parquet",
        overhead_samples="results/trace/{model}/{mode}_b{batch}.overhead_samples.parquet",
        failures="results/failures/trace/{model}/{mode}_b{batch}.parquet",
    params:
        settings=settings_of("trace"),
    log:
        "logs/trace/{model}/{mode}_b{batch}.log",
    threads: config["threads"]
    resources:
        measure=MEASURE_ALONE,
    conda:
        ENV
    script:
        "../../scripts/trace.py"
