rule e2e:
    """End-to-end timing of one model workload with the operators' timing core."""
    input:
        tier_check=get_tier_check,
    output:
        table="results/e2e/{model}/{mode}_b{batch}.parquet",
        samples="results/e2e/{model}/{mode}_b{batch}.samples.parquet",
        failures="results/failures/e2e/{model}/{mode}_b{batch}.parquet",
    params:
        settings=settings_of("e2e"),
    log:
        "logs/e2e/{model}/{mode}_b{batch}.log",
    threads: config["threads"]
    resources:
        measure=MEASURE_ALONE,
    conda:
        ENV
    script:
        "../../scripts/e2e.py"


rule e2e_tier:
    """End-to-end timing of one model workload with the job's memory bound to a slower NUMA tier (the whole model
    on that tier, checked against its prediction from isolated placements); empty where the host lacks the tier."""
    input:
        tier_check=get_tier_check,
    output:
        table="results/e2e/{model}/{mode}_b{batch}.on_{tier}.parquet",
        samples="results/e2e/{model}/{mode}_b{batch}.on_{tier}.samples.parquet",
        failures="results/failures/e2e/{model}/{mode}_b{batch}.on_{tier}.parquet",
    params:
        settings=settings_of("e2e_tier"),
    log:
        "logs/e2e/{model}/{mode}_b{batch}.on_{tier}.log",
    threads: config["threads"]
    resources:
        measure=MEASURE_ALONE,
    conda:
        ENV
    script:
        "../../scripts/e2e_tier.py"
