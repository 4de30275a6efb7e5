from opcost import stages

i, o = snakemake.input, snakemake.output
stages.run_rule(snakemake, stages.validate, snakemake.config, i.layers, i.measurements, i.e2e, o.table, o.tsv,
                o.consistency, i.overheads, i.op_types)
