from opcost import stages

w, o = snakemake.wildcards, snakemake.output
stages.run_rule(snakemake, stages.e2e, snakemake.config, w.model, w.mode, int(w.batch), o.table, o.samples,
                out_failures=o.failures)
