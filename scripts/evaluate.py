from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rule, stages

i = snakemake.input
inputs = stages.EvaluationFiles(configs=i.configs, previous=i.previous if "previous" in i.keys() else None,
                                layers=i.layers, measurements=[*i.profiles, *i.insitu], e2e=[*i.e2e, *i.profile_e2e],
                                overheads=i.overheads, op_types=i.op_types)
rule.run_rule(snakemake, stages.evaluate, rule.stage_config(snakemake, "evaluate"),
              iteration=int(snakemake.wildcards.n), inputs=inputs, out=snakemake.output[0])
