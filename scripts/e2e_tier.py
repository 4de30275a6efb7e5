# Not handed to a warm process (opcost.warm): its memory policy must hold before torch is imported.
# The job's memory is bound to the tier before anything starts torch (and its threads, which inherit the binding).
from opcost.config import StageConfig
from opcost.measure.numa import bind_to_tier

w, o = snakemake.wildcards, snakemake.output
config = StageConfig.from_params("e2e_tier", snakemake.params.settings, w.model)
unbound = bind_to_tier(config["placement"], w.tier)

from opcost import rule, stages  # noqa: E402

rule.run_rule(snakemake, stages.e2e_tier, config, model=w.model, mode=w.mode, batch=int(w.batch), tier=w.tier,
              unbound=unbound, out=o.table, out_samples=o.samples, out_failures=o.failures)
