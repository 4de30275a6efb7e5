from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import journal, rerun, rule, stages

i, o = snakemake.input, snakemake.output
rule.run_rule(snakemake, stages.predict_unseen, rule.stage_config(snakemake, "unseen"),
              db_paths={"layers": i.layers, "measurements": i.measurements, "e2e": i.e2e, "overheads": i.overheads},
              unseen_layer_paths=i.unseen_layers, unseen_e2e_paths=i.unseen_e2e, out=o.table, out_tsv=o.tsv,
              out_calibration=o.calibration, traces=f"{journal.FOLDER}/unseen_traces",
              forced=rerun.forced(snakemake.rule, list(o)))
