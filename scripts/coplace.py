from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rule, stages

w, o = snakemake.wildcards, snakemake.output
rule.run_rule(snakemake, stages.coplace, rule.stage_config(snakemake, "coplace"), model=w.model, mode=w.mode,
              batch=int(w.batch), out=o.table, out_summary=o.summary, out_failures=o.failures)
