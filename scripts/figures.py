from opcost import stages

i = snakemake.input
stages.run_rule(snakemake, stages.make_figures, snakemake.config, i.layers, i.measurements, i.e2e, i.predictions,
                i.consistency, i.loop, snakemake.output[0], i.tiers,
                {part: i[f"trace_{part}"] for part in ("op_types", "iterations", "overhead_samples")}, i.coplace,
                i.unseen)
