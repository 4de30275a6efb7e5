from opcost import stages

w = snakemake.wildcards
stages.run_rule(snakemake, stages.extract, snakemake.config, w.model, w.mode, int(w.batch), snakemake.output[0])
