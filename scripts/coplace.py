from opcost import stages

w, o = snakemake.wildcards, snakemake.output
stages.run_rule(snakemake, stages.coplace, snakemake.config, w.model, w.mode, int(w.batch), o.table, o.summary,
                out_failures=o.failures)
