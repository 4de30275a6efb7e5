from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rule, stages

w, o = snakemake.wildcards, snakemake.output
rule.run_rule(snakemake, stages.insitu, rule.stage_config(snakemake, "insitu"), model=w.model, mode=w.mode,
              batch=int(w.batch), out=o.table, out_samples=o.samples, out_e2e=o.e2e, out_failures=o.failures)
