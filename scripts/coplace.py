from opcost import stages

w, o = snakemake.wildcards, snakemake.output
stages.run_rule(snakemake, stages.coplace, snakemake.config, model=w.model, mode=w.mode, batch=int(w.batch),
                out=o.table, out_summary=o.summary, out_failures=o.failures)
