from opcost import stages
from opcost.config import workloads

i, o = snakemake.input, snakemake.output
stages.run_rule(snakemake, stages.advise, snakemake.config,
                db_paths={name: i[name] for name in ("layers", "measurements", "e2e", "overheads")},
                out_plans=dict(zip(workloads(snakemake.config), o.plans)), out_figure=o.figure)
