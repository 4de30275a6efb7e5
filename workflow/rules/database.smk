rule database:
    """Measurement shards merged into the Parquet database under results/db/."""
    input:
        measurements=get_profile_chunks,
        insitu=get_insitu_tables,
        e2e=get_e2e_tables,
    output:
        measurements="results/db/measurements.parquet",
        e2e="results/db/e2e.parquet",
    log:
        "logs/database.log",
    conda:
        ENV
    script:
        "../../scripts/database.py"
