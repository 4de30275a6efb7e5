from opcost import stages

i = snakemake.input
stages.run_rule(snakemake, stages.failures, i.failures, i.measurements, i.layers, snakemake.output[0])
