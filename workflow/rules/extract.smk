rule extract:
    """Leaf-module calls and aten ops outside leaf modules of one model workload, deduplicated with counts."""
    output:
        layers="results/layers/{model}/{mode}_b{batch}.parquet",
        failures="results/failures/extract/{model}/{mode}_b{batch}.parquet",
    params:
        settings=settings_of("extract"),
    log:
        "logs/extract/{model}/{mode}_b{batch}.log",
    resources:
        measure=MEASURE_SHARED,
    conda:
        ENV
    script:
        "../../scripts/extract.py"


rule catalog:
    """The union of all workloads' (and sweep points') operator configurations: the profiling work list."""
    input:
        get_layer_tables,
        get_sweep_layers,
    output:
        "results/db/configs.parquet",
    params:
        mark=run_mark("catalog"),  # a job that failed is redone
    log:
        "logs/catalog.log",
    resources:
        measure=MEASURE_SHARED,
    conda:
        ENV
    script:
        "../../scripts/catalog.py"


rule sweeps:
    """Operator configurations of every sweep point (config `sweeps`), extracted in one job."""
    output:
        layers="results/sweeps/layers.parquet",
        failures="results/failures/extract/sweeps.parquet",
    params:
        settings=settings_of("sweeps"),
    log:
        "logs/sweeps.log",
    resources:
        measure=MEASURE_SHARED,
    conda:
        ENV
    script:
        "../../scripts/sweeps.py"
