from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from opcost import rule, stages
from opcost.report.figures import FigureFiles

i, o = snakemake.input, snakemake.output
files = FigureFiles(layers=i.layers, measurements=i.measurements, e2e=i.e2e, predictions=i.predictions,
                    consistency=i.consistency, loop=i.loop, tiers=i.tiers, coplace=i.coplace, unseen=i.unseen,
                    traces={part: i[f"trace_{part}"] for part in ("op_types", "iterations", "overhead_samples")},
                    tier_costs=i.tier_costs, generate=i.generate)
rule.run_rule(snakemake, stages.make_figures, rule.stage_config(snakemake, "figures"), files=files,
              outdir=o[0], failures=i.failures, summary=o.summary)
