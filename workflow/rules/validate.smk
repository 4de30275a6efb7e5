rule validate:
    """Prediction (sum of count x operator time, and with the trace's modelled overheads) against the measured
    end-to-end time, per workload; and the whole model on each slower memory tier, from the placements measured."""
    input:
        layers=get_layer_tables,
        measurements="results/db/measurements.parquet",
        e2e="results/db/e2e.parquet",
        overheads=get_trace_tables("overheads"),
        op_types=get_trace_tables("op_types"),
    output:
        table="results/validation/predictions.parquet",
        tsv=report(
            "results/validation/predictions.tsv",
            caption="../report/predictions.rst",
            category="Validation",
        ),
        consistency="results/validation/consistency.parquet",
        tiers="results/validation/tiers.parquet",
        tiers_tsv=report(
            "results/validation/tiers.tsv",
            caption="../report/tiers.rst",
            category="Validation",
        ),
    params:
        settings=settings_of("validate"),
    log:
        "logs/validate.log",
    resources:
        measure=MEASURE_SHARED,
    conda:
        ENV
    script:
        "../../scripts/validate.py"


rule unseen:
    """The `predict_only` workloads predicted from the database without profiling (each one's overhead between
    operators from a short trace of its own, taken in this job), against their end-to-end time; their errors kept
    beside the database: the interval of a prediction of a model never profiled rests on them."""
    input:
        layers="results/db/layers.parquet",
        measurements="results/db/measurements.parquet",
        e2e="results/db/e2e.parquet",
        overheads="results/db/overheads.parquet",
        unseen_layers=get_unseen("layers"),
        unseen_e2e=get_unseen("e2e"),
    output:
        table="results/validation/unseen.parquet",
        tsv="results/validation/unseen.tsv",
        calibration="results/db/calibration.parquet",
    params:
        settings=settings_of("unseen"),
    log:
        "logs/unseen.log",
    resources:
        measure=MEASURE_ALONE,
    conda:
        ENV
    script:
        "../../scripts/unseen.py"


rule generate:
    """Hugging Face generate() of each decoder model (config `generate`: prompts x new tokens x batch sizes)
    predicted from the database (the prefill, each decode step at its own context, generate()'s own loop) and timed
    itself, in turn with the model's measured decode step."""
    input:
        layers="results/db/layers.parquet",
        measurements="results/db/measurements.parquet",
        e2e="results/db/e2e.parquet",
        overheads="results/db/overheads.parquet",
    output:
        table="results/validation/generate.parquet",
        tsv=report(
            "results/validation/generate.tsv",
            caption="../report/generate.rst",
            category="Validation",
        ),
    params:
        settings=settings_of("generate"),
        questions=[list(q) for q in GENERATE],  # (model, batch, prompt, new tokens): a change reruns the job
    log:
        "logs/generate.log",
    resources:
        measure=MEASURE_ALONE,
    conda:
        ENV
    script:
        "../../scripts/generate.py"
