rule database:
    """Measurement shards merged into the Parquet database under results/db/."""
    input:
        measurements=get_profile_chunks,
        insitu=get_insitu_tables,
        coplace=get_coplace("table"),
        insitu_e2e=get_insitu_e2e_tables,
        e2e=get_e2e_tables,
        profile_e2e=get_profile_e2e,
        layers=get_layer_tables,
    output:
        measurements="results/db/measurements.parquet",
        e2e="results/db/e2e.parquet",
        layers="results/db/layers.parquet",
    log:
        "logs/database.log",
    conda:
        ENV
    script:
        "../../scripts/database.py"
