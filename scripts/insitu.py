from opcost import stages

w, o = snakemake.wildcards, snakemake.output
stages.run_rule(snakemake, stages.insitu, snakemake.config, model=w.model, mode=w.mode, batch=int(w.batch),
                out=o.table, out_samples=o.samples, out_e2e=o.e2e, out_failures=o.failures)
