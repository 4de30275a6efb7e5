from opcost import stages

o = snakemake.output
stages.run_rule(snakemake, stages.profile, snakemake.config, snakemake.input[0], int(snakemake.wildcards.chunk),
                o.measurements, o.samples)
