rule profile:
    """Isolated timing of the configurations whose id hashes to this chunk."""
    input:
        "results/db/configs.parquet",
    output:
        measurements="results/profile/chunk{chunk}.parquet",
        samples="results/profile/samples_{chunk}.parquet",
    log:
        "logs/profile/chunk{chunk}.log",
    threads: config["threads"]
    resources:
        measure=1,
    conda:
        ENV
    script:
        "../../scripts/profile.py"


rule insitu:
    """All configurations of one workload timed inside real model iterations (simultaneous profiling)."""
    output:
        table="results/insitu/{model}/{mode}_b{batch}.parquet",
        samples="results/insitu/{model}/{mode}_b{batch}.samples.parquet",
    log:
        "logs/insitu/{model}/{mode}_b{batch}.log",
    threads: config["threads"]
    resources:
        measure=1,
    conda:
        ENV
    script:
        "../../scripts/insitu.py"
