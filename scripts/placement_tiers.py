from opcost import rule, stages

rule.run_rule(snakemake, stages.placement_tiers, rule.stage_config(snakemake, "placement_tiers"),
              out=snakemake.output[0])
