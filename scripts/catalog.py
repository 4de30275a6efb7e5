from opcost import stages

stages.run_rule(snakemake, stages.make_catalog, layer_paths=snakemake.input, out=snakemake.output[0])
