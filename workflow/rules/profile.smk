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
        op_types=added_op_types,  # what the previous evaluation chose: another choice reruns the job
    log:
        "logs/profile/iter{n}_chunk{chunk}.log",
    threads: config["threads"]
    resources:
        measure=MEASURE_ALONE,
    conda:
        ENV
    script:
        "../../scripts/profile.py"


rule alone:
    """Each configuration of one workload timed alone, every call after a call of itself, as a sweep point's chain
    times its operator: beside the same configurations timed in model order, what a sweep point costs inside a model
    (opcost.analysis.in_model)."""
    input:
        layers="results/layers/{model}/{mode}_b{batch}.parquet",
    output:
        table="results/alone/{model}/{mode}_b{batch}.parquet",
        samples="results/alone/{model}/{mode}_b{batch}.samples.parquet",
        failures="results/failures/alone/{model}/{mode}_b{batch}.parquet",
    params:
        settings=settings_of("alone"),
    log:
        "logs/alone/{model}/{mode}_b{batch}.log",
    threads: config["threads"]
    resources:
        measure=MEASURE_ALONE,
    conda:
        ENV
    script:
        "../../scripts/alone.py"


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
