from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rule, stages

i = snakemake.input
rule.run_rule(snakemake, stages.failures, failure_paths=i.failures, measurements_path=i.measurements,
              layers_path=i.layers, out_tsv=snakemake.output[0])
