from opcost import stages

i, o, w = snakemake.input, snakemake.output, snakemake.wildcards
stages.run_rule(snakemake, stages.profile, snakemake.config, i.configs, int(w.n), int(w.chunk),
                i.previous[0] if i.previous else None, o.measurements, o.samples, o.e2e)
