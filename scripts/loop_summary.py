from opcost import stages

o = snakemake.output
stages.run_rule(snakemake, stages.loop_summary, evaluation_paths=snakemake.input, out_summary=o.summary,
                out_text=o.text, out_fragment=o.fragment)
