from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rule, stages

i, o = snakemake.input, snakemake.output
rule.run_rule(snakemake, stages.validate, rule.stage_config(snakemake, "validate"),
              inputs=stages.ValidationFiles(layers=i.layers, measurements=i.measurements, e2e=i.e2e,
                                            overheads=i.overheads, op_types=i.op_types),
              out=stages.ValidationOutputs(predictions=o.table, tsv=o.tsv, consistency=o.consistency,
                                           tiers=o.tiers, tiers_tsv=o.tiers_tsv))
