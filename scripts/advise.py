from opcost.warm import hand_over

hand_over()  # the job runs in a warm process where one serves (opcost.warm)
from pathlib import Path

from opcost import rule, stages

i, o = snakemake.input, snakemake.output
plans = {(Path(p).parent.name, *Path(p).stem.rsplit("_b", 1)): p for p in o.plans}  # {model}/{mode}_b{batch}.yaml
rule.run_rule(snakemake, stages.advise, rule.stage_config(snakemake, "advise"),
              db_paths={name: i[name] for name in ("layers", "measurements", "e2e", "overheads")},
              out_plans={(m, mode, int(b)): p for (m, mode, b), p in plans.items()}, out_figure=o.figure)
