rule profile:
    """Isolated timing of the configurations whose operator type is new in loop iteration n and whose id hashes
    to this chunk."""
    input:
        configs="results/db/configs.parquet",
        tiers="results/placement/tiers.json",
        previous=get_previous_evaluation,
    output:
        measurements="results/profile/iter{n}_chunk{chunk}.parquet",
        samples="results/profile/iter{n}_samples_{chunk}.parquet",
        e2e=PROFILE_E2E,
    params:
        settings=settings_of("profile"),
    log:
        "logs/profile/iter{n}_chunk{chunk}.log",
    threads: config["threads"]
    resources:
        measure=MEASURE_ALONE,
    conda:
        ENV
    script:
        "../../scripts/profile.py"


rule insitu:
    """All configurations of one workload timed inside real model iterations (simultaneous profiling)."""
    input:
        tier_check=get_tier_check,
    output:
        table="results/insitu/{model}/{mode}_b{batch}.parquet",
        samples="results/insitu/{model}/{mode}_b{batch}.samples.parquet",
        e2e="results/insitu/{model}/{mode}_b{batch}.e2e.parquet",
        failures="results/failures/insitu/{model}/{mode}_b{batch}.parquet",
    params:
        settings=settings_of("insitu"),
    log:
        "logs/insitu/{model}/{mode}_b{batch}.log",
    threads: config["threads"]
    resources:
        measure=MEASURE_ALONE,
    conda:
        ENV
    script:
        "../../scripts/insitu.py"
