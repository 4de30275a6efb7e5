from opcost import stages

i = snakemake.input
stages.run_rule(snakemake, stages.evaluate, snakemake.config, iteration=int(snakemake.wildcards.n),
                configs_path=i.configs, previous_evaluation=i.previous if "previous" in i.keys() else None,
                layer_paths=i.layers, measurement_paths=[*i.profiles, *i.insitu], e2e_paths=[*i.e2e, *i.profile_e2e],
                out=snakemake.output[0], overhead_paths=i.overheads, op_type_paths=i.op_types)
