from opcost import stages

i = snakemake.input
stages.run_rule(snakemake, stages.failures, failure_paths=i.failures, measurements_path=i.measurements,
                layers_path=i.layers, out_tsv=snakemake.output[0])
