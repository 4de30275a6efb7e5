from opcost import stages

o, w = snakemake.output, snakemake.wildcards
stages.run_rule(snakemake, stages.trace, snakemake.config, w.model, w.mode, int(w.batch), o.trace,
                {part: o[part] for part in stages.TRACE_PARTS}, out_failures=o.failures)
