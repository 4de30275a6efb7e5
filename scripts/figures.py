from opcost import stages

i = snakemake.input
stages.run_rule(snakemake, stages.make_figures, snakemake.config, layers=i.layers, measurements=i.measurements,
                e2e=i.e2e, predictions=i.predictions, consistency=i.consistency, loop=i.loop,
                outdir=snakemake.output[0], tiers=i.tiers,
                traces={part: i[f"trace_{part}"] for part in ("op_types", "iterations", "overhead_samples")},
                coplace=i.coplace, unseen=i.unseen, failures=i.failures, summary=snakemake.output.summary,
                tier_costs=i.tier_costs)
