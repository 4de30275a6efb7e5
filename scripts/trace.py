from opcost import stages

o, w = snakemake.output, snakemake.wildcards
stages.run_rule(snakemake, stages.trace, snakemake.config, model=w.model, mode=w.mode, batch=int(w.batch),
                out_trace=o.trace, out_tables={part: o[part] for part in stages.TRACE_PARTS}, out_failures=o.failures)
