from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rule, stages

i, o = snakemake.input, snakemake.output
rule.run_rule(snakemake, stages.database, measurement_paths=[*i.measurements, *i.insitu, *i.alone, *i.coplace],
              e2e_paths=[*i.e2e, *i.tier_e2e, *i.insitu_e2e, *i.profile_e2e], layer_paths=i.layers,
              out_measurements=o.measurements, out_e2e=o.e2e, out_layers=o.layers,
              out_overheads=o.overheads, overhead_paths=i.overheads, op_type_paths=i.op_types)
