from opcost import stages

w, o = snakemake.wildcards, snakemake.output
stages.run_rule(snakemake, stages.extract, snakemake.config, model=w.model, mode=w.mode, batch=int(w.batch),
                out=o.layers, out_failures=o.failures)
