from opcost import stages

o = snakemake.output
stages.run_rule(snakemake, stages.loop_summary, snakemake.input, o.summary, o.text, o.fragment)
