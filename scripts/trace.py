from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rule, stages

o, w = snakemake.output, snakemake.wildcards
rule.run_rule(snakemake, stages.trace, rule.stage_config(snakemake, "trace"), model=w.model, mode=w.mode,
              batch=int(w.batch), out_trace=o.trace, out_tables={part: o[part] for part in stages.TRACE_PARTS},
              out_failures=o.failures)
