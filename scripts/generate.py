from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rule, stages

i, o = snakemake.input, snakemake.output
rule.run_rule(snakemake, stages.validate_generate, rule.stage_config(snakemake, "generate"), snakemake.params.questions,
              db_paths={"layers": i.layers, "measurements": i.measurements, "e2e": i.e2e, "overheads": i.overheads},
              out=o.table, out_tsv=o.tsv)
