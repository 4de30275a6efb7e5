from opcost import stages

stages.run_rule(snakemake, stages.make_catalog, snakemake.input, snakemake.output[0])
