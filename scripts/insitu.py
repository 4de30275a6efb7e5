from opcost import stages

w, o = snakemake.wildcards, snakemake.output
stages.run_rule(snakemake, stages.insitu, snakemake.config, w.model, w.mode, int(w.batch), o.table, o.samples,
                o.e2e, out_failures=o.failures)
