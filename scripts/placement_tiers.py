from opcost import stages

stages.run_rule(snakemake, stages.placement_tiers, snakemake.config, snakemake.output[0])
