from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rule, stages

o = snakemake.output
rule.run_rule(snakemake, stages.extract_sweeps, rule.stage_config(snakemake, "sweeps"), out=o.layers,
              out_failures=o.failures)
