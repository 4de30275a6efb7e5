from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rule, stages

o = snakemake.output
rule.run_rule(snakemake, stages.loop_summary, evaluation_paths=snakemake.input, out_summary=o.summary,
              out_text=o.text, out_fragment=o.fragment)
