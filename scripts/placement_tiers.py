from opcost import stages

stages.run_rule(snakemake, stages.placement_tiers, snakemake.config, out=snakemake.output[0])
