from opcost import stages

i, o = snakemake.input, snakemake.output
stages.run_rule(snakemake, stages.database, [*i.measurements, *i.insitu, *i.coplace],
                [*i.e2e, *i.insitu_e2e, *i.profile_e2e], i.layers, o.measurements, o.e2e, o.layers)
