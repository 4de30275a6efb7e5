"""How to ask the database a question outside opcost: the section of docs/data.md (written by
:func:`opcost.tables.markdown`) with a pandas and a DuckDB example, and the hosts and runs a database holds.

Both examples take the rows `opcost predict` takes (:func:`opcost.analysis.estimate.conditions`): isolated, `ok`,
baseline-placement rows of one host, device and thread count, one per configuration and phase, a row timed in
rotation before a back-to-back one, then the newest. tests/test_data_examples.py runs them on a merged database
of two hosts and compares them with the library, so the text below must stay runnable as written; each example's
settings lines (``db, host, device, threads = ...`` in Python, ``SET VARIABLE ...`` in SQL) are the ones a reader
edits.
"""
from __future__ import annotations

PANDAS = '''\
import json
import pandas as pd

db, host, device, threads = "results/db", "node07", "cpu", 4  # as opcost predict --host --device --threads
m = pd.read_parquet(f"{db}/measurements.parquet")
c = pd.read_parquet(f"{db}/configs.parquet")
m = m[(m["source"] == "isolated") & (m["status"] == "ok") & m["baseline"].fillna(m["placement"] == "default")
      & (m["host"] == host) & (m["device"] == device) & (m["threads"] == threads)]
# one row per configuration and phase: timed in rotation (cache fresh/rotation) before back to back, then the newest
m = m.assign(rotated=m["cache"].isin(["fresh", "rotation"])).sort_values(["rotated", "timestamp"])
cost = m.drop_duplicates(["config_id", "phase"], keep="last").merge(c[["config_id", "params"]], on="config_id")
linear = cost[cost["op_type"] == "Linear"]
linear = linear.assign(out_features=linear["params"].map(lambda p: json.loads(p)["out_features"]))
print(linear.groupby(["out_features", "phase"])["trimmed_mean_s"].median())'''

SQL = """\
SET VARIABLE conditions = {'db': 'results/db', 'host': 'node07', 'device': 'cpu', 'threads': 4};
SET VARIABLE workload = {'model': 'resnet18', 'batch': 8, 'mode': 'inference'};
WITH cost AS (  -- the rows opcost predict uses: one per configuration and phase, rotation first, then the newest
  SELECT * FROM read_parquet(getvariable('conditions').db || '/measurements.parquet')
  WHERE source = 'isolated' AND status = 'ok' AND coalesce(baseline, placement = 'default')
    AND host = getvariable('conditions').host AND device = getvariable('conditions').device
    AND threads = getvariable('conditions').threads
  QUALIFY row_number() OVER (PARTITION BY config_id, phase
                             ORDER BY coalesce(cache IN ('fresh', 'rotation'), false) DESC, timestamp DESC) = 1)
SELECT l.op_type, cost.phase, sum(l.count * cost.trimmed_mean_s) AS seconds_per_iteration
FROM read_parquet(getvariable('conditions').db || '/layers.parquet') l JOIN cost USING (config_id)
WHERE l.model = getvariable('workload').model AND l.batch = getvariable('workload').batch
  AND l.mode = getvariable('workload').mode
GROUP BY ALL ORDER BY seconds_per_iteration DESC;"""


HOSTS = '''\
import pandas as pd

e = pd.read_parquet("results/db/e2e.parquet")  # every end-to-end row names its host, device, threads and run
print(e.groupby(["host", "device", "threads", "run"], dropna=False)["timestamp"].agg(["min", "max", "count"]))'''


MARKDOWN = [
    "## Asking the database a question",
    "",
    "`opcost db show` answers the common ones: the cost per call (`cost_s`, the statistic predictions use) of",
    "the configurations that match, with their parameters and input shapes, e.g.",
    "",
    "    opcost db show --op Conv2d --param kernel_size=[3,3] --param stride=[1,1] --shape 8,64,56,56",
    "    opcost db show --op Linear --mode training --phase backward --host node07 --csv > linear.csv",
    "",
    "`db show` lists every row that matches. A database holds several rows of one configuration: one per host,",
    "device and thread count it was measured on (a merged database), one per re-measurement, and on a host with",
    "memory tiers both the row timed in rotation and the back-to-back reference with every tensor on the fast",
    "tier (both `baseline`). `opcost predict` uses one of them per configuration and phase: the isolated, `ok`,",
    "`baseline` rows of one host, device and thread count (`--host`, `--device`, `--threads`), a row timed in",
    "rotation (`cache` `fresh` or `rotation`) before a back-to-back one, then the newest. Summing all rows instead",
    "adds hosts together and counts a two-tier host's configurations twice.",
    "",
    "The tables are plain Parquet, so any Parquet reader asks the rest, selecting rows the same way. pandas, the",
    "cost per call of each Linear configuration by its output width:",
    "",
    "```python",
    *PANDAS.splitlines(),
    "```",
    "",
    "DuckDB (`pip install duckdb`), one workload's operator time per iteration by op type and phase, as",
    "`opcost predict` sums it before adding the overhead between operators (a training workload adds one",
    "`autograd engine` call per iteration: the median `engine_s` of its backward rows):",
    "",
    "```sql",
    *SQL.splitlines(),
    "```",
    "",
    "Which hosts and runs a database holds, and when each measured: `opcost db runs --db results/db` (one row per",
    "run and conditions: host, processor, device, threads, torch, first and last timestamp, configurations measured,",
    "workloads timed end to end); in pandas (`run` is missing in a run's own database and set by `opcost db merge`):",
    "",
    *(f"    {line}" if line else "" for line in HOSTS.splitlines()),
    "",
    "On a database that merges several runs of one host, `opcost predict` also prefers the rows of one run",
    "(`--run`; by default the run of the workload's newest end-to-end reference): to do the same, keep only that",
    "`run` (a column of `measurements`, set by `opcost db merge`) or rank it first in the ordering.",
    "",
    "A model name stands for one model in a database: `opcost db merge` refuses two inputs whose same-named model was",
    "built otherwise (another module, size or dtype), naming the model and both inputs, and writes nothing; merge each",
    "variant into a database of its own, or profile one under another name.",
]
