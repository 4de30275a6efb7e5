from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rerun, rule, stages

w, i, o = snakemake.wildcards, snakemake.input, snakemake.output
rule.run_rule(snakemake, stages.alone, rule.stage_config(snakemake, "alone"), model=w.model, mode=w.mode,
              batch=int(w.batch), layers_path=i.layers, out=o.table, out_samples=o.samples, out_failures=o.failures,
              forced=rerun.forced(snakemake.rule, list(o)))
