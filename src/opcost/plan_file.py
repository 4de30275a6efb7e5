"""The placement plan file's data contract (:func:`opcost.analysis.advise.advise` writes it; docs/data.md shows it)."""

PLAN_FILE = [
    "## Placement plan files",
    "",
    "`results/advise/{model}/{mode}_b{batch}.yaml` (the advise stage, per `advise.budgets`) and `opcost advise "
    "--out FILE` — YAML, predicted, never applied by opcost:",
    "",
    "| key | meaning |",
    "|---|---|",
    "| `model`, `batch`, `mode`, `host`, `device`, `threads`, `statistic` | the workload and the measurement "
    "conditions its costs were taken on |",
    "| `fast`, `slow` | the two tiers placed between (names of `placement.tiers`); `tiers` (the stage's files): "
    "each one's config entry, to apply a plan |",
    "| `footprint_bytes`, `must_stay_fast_bytes`, `groups` | bytes of every placeable tensor, of those pinned to the "
    "fast tier, and the number of tensor groups (a parameter group, or the activations) |",
    "| `all_fast_s`, `all_slow_s`, `all_slow_slowdown` | the predicted iteration with every group on the fast tier, "
    "on the slow tier, and their ratio |",
    "| `notes` | what the plans rest on or leave out, one line each |",
    "| `budgets` | per budget asked (`budget` as given, `budget_bytes`): one plan per method, `optimiser` (an exact "
    "integer program where it solves in time: `exact`), `greedy` and `first_touch`; a budget that cannot be met "
    "holds `error` instead |",
    "| a plan's keys | `predicted_s`, `low_s`, `high_s` (the 90% interval), `predicted_slowdown`, `low_slowdown`, "
    "`high_slowdown` (over all on the fast tier), `estimated_share` (the share of its operators' time estimated, "
    "not measured on the slow tier), `bytes` (per tier), `solve_s`, `exact`, `plan` (tensor name -> tier; "
    "`<activations>` for the activations' group) |",
    "| `curve` | the same plans without `plan` at 11 shares of the footprint, 0 to 1 (`share`, `budget_bytes`): the "
    "figure's slowdown against budget |",
    "| `skipped` | why the workload has no plan (one tier only, a model that failed); then `budgets` and `curve` are "
    "empty |",
]
