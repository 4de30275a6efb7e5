from opcost import stages

i, o = snakemake.input, snakemake.output
stages.run_rule(snakemake, stages.validate, snakemake.config, layer_paths=i.layers, measurements_path=i.measurements,
                e2e_path=i.e2e, out=o.table, out_tsv=o.tsv, out_consistency=o.consistency, overhead_paths=i.overheads,
                op_type_paths=i.op_types, out_tiers=o.tiers, out_tiers_tsv=o.tiers_tsv)
