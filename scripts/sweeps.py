from opcost import stages

o = snakemake.output
stages.run_rule(snakemake, stages.extract_sweeps, snakemake.config, out=o.layers, out_failures=o.failures)
