from opcost import stages

i = snakemake.input
stages.run_rule(snakemake, stages.evaluate, snakemake.config, int(snakemake.wildcards.n), i.configs,
                i.previous if "previous" in i.keys() else None, i.layers, [*i.profiles, *i.insitu],
                [*i.e2e, *i.profile_e2e], snakemake.output[0], i.overheads, i.op_types)
