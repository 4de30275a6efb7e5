from opcost import stages

w, o = snakemake.wildcards, snakemake.output
stages.run_rule(snakemake, stages.extract, snakemake.config, w.model, w.mode, int(w.batch), o.layers,
                out_failures=o.failures)
