from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rule, stages

w, o = snakemake.wildcards, snakemake.output
rule.run_rule(snakemake, stages.e2e, rule.stage_config(snakemake, "e2e"), model=w.model, mode=w.mode,
              batch=int(w.batch), out=o.table, out_samples=o.samples, out_failures=o.failures)
