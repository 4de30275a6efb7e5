from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rerun, rule, stages

i, o, w = snakemake.input, snakemake.output, snakemake.wildcards
rule.run_rule(snakemake, stages.profile, rule.stage_config(snakemake, "profile"), configs_path=i.configs,
              iteration=int(w.n), chunk=int(w.chunk), previous_evaluation=i.previous[0] if i.previous else None,
              out_measurements=o.measurements, out_samples=o.samples, out_e2e=o.e2e,
              forced=rerun.forced(snakemake.rule, list(o)))
