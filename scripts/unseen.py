from opcost import stages

i, o = snakemake.input, snakemake.output
stages.run_rule(snakemake, stages.predict_unseen, snakemake.config,
                {"layers": i.layers, "measurements": i.measurements, "e2e": i.e2e}, i.unseen_layers, i.unseen_e2e,
                o.table, o.tsv)
