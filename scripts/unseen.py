from opcost import stages

i, o = snakemake.input, snakemake.output
stages.run_rule(snakemake, stages.predict_unseen, snakemake.config,
                db_paths={"layers": i.layers, "measurements": i.measurements, "e2e": i.e2e, "overheads": i.overheads},
                unseen_layer_paths=i.unseen_layers, unseen_e2e_paths=i.unseen_e2e, out=o.table, out_tsv=o.tsv)
