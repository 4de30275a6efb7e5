from opcost import stages

w, o = snakemake.wildcards, snakemake.output
stages.run_rule(snakemake, stages.e2e, snakemake.config, model=w.model, mode=w.mode, batch=int(w.batch), out=o.table,
                out_samples=o.samples, out_failures=o.failures)
