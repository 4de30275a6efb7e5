"""opcost: what each operator of a PyTorch model costs, and whether the costs add up to the model.

The package follows the workflow's stages, one layer per subpackage:

* :mod:`opcost.model` — what is measured: models, workloads, operator extraction, replay of one configuration;
* :mod:`opcost.measure` — how: the clock, isolated (rotation, back-to-back) and in-situ profiling, placements,
  energy, host facts;
* :mod:`opcost.analysis` — what it says: predictions, the coverage loop, traces, the cost model;
* :mod:`opcost.report` — what the user reads: figures and the run's summary.

Beside them, the data contract (:mod:`opcost.tables`, :mod:`opcost.io`, :mod:`opcost.database`), the
configuration (:mod:`opcost.config`) and the workflow glue: :mod:`opcost.stages` (one function per Snakemake rule,
called by the thin scripts under ``scripts/``), :mod:`opcost.cli`, :mod:`opcost.journal`, :mod:`opcost.failures`,
:mod:`opcost.check`, :mod:`opcost.errors`.
"""

__version__ = "0.1.0"
