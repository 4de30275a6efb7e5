from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rule, stages

rule.run_rule(snakemake, stages.placement_tiers, rule.stage_config(snakemake, "placement_tiers"),
              out=snakemake.output[0])
