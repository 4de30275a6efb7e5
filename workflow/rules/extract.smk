rule extract:
    """Leaf-module calls and aten ops outside leaf modules of one model workload, deduplicated with counts."""
    output:
        layers="results/layers/{model}/{mode}_b{batch}.parquet",
        failures="results/failures/extract/{model}/{mode}_b{batch}.parquet",
    params:
        settings=settings_of("extract"),
    log:
        "logs/extract/{model}/{mode}_b{batch}.log",
    conda:
        ENV
    script:
        "../../scripts/extract.py"


rule catalog:
    """The union of all workloads' operator configurations: the profiling work list."""
    input:
        get_layer_tables,
    output:
        "results/db/configs.parquet",
    log:
        "logs/catalog.log",
    conda:
        ENV
    script:
        "../../scripts/catalog.py"
