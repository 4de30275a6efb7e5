rule validate:
    """Prediction (sum of count x operator time) against the measured end-to-end time, per workload."""
    input:
        layers=get_layer_tables,
        measurements="results/db/measurements.parquet",
        e2e="results/db/e2e.parquet",
    output:
        table="results/validation/predictions.parquet",
        tsv=report(
            "results/validation/predictions.tsv",
            caption="../report/predictions.rst",
            category="Validation",
        ),
        consistency="results/validation/consistency.parquet",
    log:
        "logs/validate.log",
    conda:
        ENV
    script:
        "../../scripts/validate.py"
