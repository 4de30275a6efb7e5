from opcost import rule, stages

rule.run_rule(snakemake, stages.make_catalog, layer_paths=snakemake.input, out=snakemake.output[0])
