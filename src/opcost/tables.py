"""The data contracts between stages: every table opcost writes, its columns, types and meaning.

This module is the single written-down source; ``docs/data.md`` is generated from it (``opcost schema``) and a test
keeps the two identical. Every Parquet file opcost writes goes through :func:`frame` (column set, order and types
enforced) and :func:`opcost.io.write_parquet` (atomic), and carries ``SCHEMA_VERSION`` in its metadata.
"""
from __future__ import annotations

from opcost import queries, trace_tables
from opcost.table_types import MODEL_KEY as _MODEL_KEY
from opcost.table_types import SCHEMA_VERSION, Column, Table, frame  # noqa: F401  (the writers' names)
from opcost.table_types import column as _c

# The per-call statistics a cost can be (config `statistic`): name -> `measurements`/`e2e` column.
STATISTICS = {"trimmed_mean": "trimmed_mean_s", "median": "median_s"}
DEFAULT_STATISTIC = "trimmed_mean"
CARRIED = "carried"  # a `feeds` entry: an input the workload carries from one iteration to the next

_HOST = (
    _c("device", "string", "`cpu` or `cuda[:N]`: where the operator ran"),
    _c("placement", "string", "memory placement: `default` (the device's own memory, no tiers configured), or a "
                              "tier per tensor, `in:<tier>,...;w:<tier>;out:<tier>` (inputs in argument order, "
                              "parameters and buffers, outputs; tiers from config `placement.tiers`)"),
    _c("threads", "Int64", "torch intra-op threads during the measurement"),
    _c("cpus", "string", "CPUs the process was allowed to run on (affinity; config `affinity: pin` restricts it "
                         "to as many CPUs as threads)"),
    _c("host", "string", "host name"),
    _c("cpu_model", "string", "CPU model name"),
    _c("gpu_name", "string", "GPU name, missing on CPU runs"),
    _c("gpu_driver", "string", "GPU driver version, missing on CPU runs"),
    _c("torch_version", "string", "torch.__version__"),
    _c("timestamp", "string", "UTC time the measurement finished (ISO 8601)"),
    _c("run", "string", "the run the row was measured in, named by the earliest `timestamp` of its run's database: "
                        "missing in a run's own database (all its rows are of that run), set by `opcost db merge` "
                        "for the rows of each input that lack it; `opcost predict` takes a workload's measured costs "
                        "and its end-to-end reference from one run", optional=True),
)

_STATS = (
    _c("median_s", "Float64", "median seconds per call (per iteration for end-to-end rows)"),
    _c("trimmed_mean_s", "Float64", "mean of the samples within 3 standard deviations of the mean, seconds"),
    _c("iqr_s", "Float64", "inter-quartile range of the samples, seconds"),
    _c("ci_low_s", "Float64", "lower end of the 95% confidence interval of the median (order statistics), seconds"),
    _c("ci_high_s", "Float64", "upper end of the 95% confidence interval of the median, seconds"),
    _c("n", "Int64", "number of samples (each sample averages `calls_per_sample` back-to-back calls; rotation and "
                     "in-situ samples are single calls)"),
    _c("calls_per_sample", "Int64", "back-to-back calls timed together in one sample"),
    _c("noisy", "boolean", "IQR/median above the configured noise threshold (after re-measuring)"),
    _c("attempts", "Int64", "measurements made: noisy isolated configurations are re-measured later (the least "
                            "noisy attempt is kept); back-to-back ones are visited until two visits agree (config "
                            "`profile.visits`: their samples are kept together), a sweep point's rotation twice "
                            "(pooled where they agree, else the lower kept)"),
)

_ENERGY = (
    _c("energy_j", "Float64", "joules per call (median over trials); missing where no energy meter exists "
                              "(never 0 for 'unknown')"),
    _c("energy_active_j", "Float64", "joules per call above idle power (idle power x duration subtracted); "
                                     "missing where the power while running was below the idle power read at the "
                                     "job's start"),
    _c("power_w", "Float64", "mean power during the energy trials, watts"),
    _c("idle_w", "Float64", "idle power measured before the job's measurements, watts"),
    _c("energy_spread", "Float64", "(max - min) / median of the per-call energy over trials"),
    _c("meter", "string", "energy meter used: `rapl`, `nvml`, or `none` where unavailable"),
)

LAYERS = Table(
    "layers", "results/layers/{model}/{mode}_b{batch}.parquet (all workloads: results/db/layers.parquet)",
    "One row per operator configuration of one model workload (extraction stage).",
    _MODEL_KEY + (
        _c("config_id", "string", "stable 12-hex id of (op, params, input specs, mode)"),
        _c("op", "string", "module class (`torch.nn.modules.conv.Conv2d`) or aten overload (`aten.add_.Tensor`)"),
        _c("op_type", "string", "short operator type: class name (`Conv2d`) or aten op name (`add_`; with `_training` "
           "where its `training` argument is true: `batch_norm_training`, a batch norm computing its statistics)"),
        _c("scope", "string", "`module` (a leaf-module call) or `functional` (an aten op outside leaf modules)"),
        _c("api", "string", "Python-level call that issued a functional op (`flatten`, `add_` for `+=`, "
                            "`multi_head_attention_forward`); missing for modules"),
        _c("count", "Int64", "calls per iteration"),
        _c("order", "Int64", "rank of the configuration's first call among the workload's configurations"),
        _c("positions", "string", "JSON list of the positions of the configuration's calls among all the "
                                  "iteration's recorded calls (0-based; profiling replays the iteration's call "
                                  "sequence from them)"),
        _c("releases", "string", "JSON list, one entry per `positions` entry: the position of the call during "
                                 "or after which the model dropped its last reference to that call's outputs (the "
                                 "call's own position when dropped at once, the last position when still alive at "
                                 "the iteration's end); profiling keeps each replayed output alive as long"),
        _c("feeds", "string", "JSON list, one entry per `positions` entry: per tensor input of that call (positional "
                              "arguments, then keyword values), `[position, output index]` of the recorded call "
                              "whose output it is (the latest, when an in-place op returned it again), `\"carried\"` "
                              "(a tensor the workload carries from one iteration to the next and the iteration did "
                              "not write before the call: a decode step's key/value cache), or null (a model input, "
                              "a parameter, a tensor made outside the records); profiling feeds each replayed call "
                              "its producer's output of the same round and its own copy of a carried tensor, as the "
                              "round before left it (`cache: fresh`)"),
        _c("params", "string", "JSON: module constructor parameters read from the module (a class the op "
                               "table does not name: also `base_class`, its nearest base the table names, and that "
                               "base's parameters; `weight_format: channels_last` where its 4-D weight is in "
                               "that order), or the aten op's arguments with tensors as specs"),
        _c("inputs", "string", "JSON list of input tensor specs `{T: shape, dtype, stride, grad}`"),
        _c("outputs", "string", "JSON list of output tensor specs"),
        _c("module_paths", "string", "JSON list of module paths (leaf module, or the module enclosing a "
                                     "functional op; `<loss>` for the training loss)"),
        _c("backward", "string", "JSON {autograd node: calls per iteration} of the backward work this "
                                 "configuration causes (training only)"),
        _c("replay", "string", "JSON: what the profiler needs to rebuild the call (model and module path, or the "
                               "aten arguments, including stored integer index values)"),
        _c("inside", "string", "JSON list of the aten operators one call of a leaf module dispatches, for a class "
                               "the op table does not list (no line of its own or of a base class: timm's "
                               "`EvoNorm2dS0`, a decoder's `...RMSNorm`, a model's own activation), a class it "
                               "lists as written in Python over aten calls (twin group `..._py`: Llama's "
                               "`LlamaRMSNorm`, GPT-2's `NewGELUActivation`) or a subclass of "
                               "one it lists with a `forward` of its own (timm's `StdConv2d`), each `{op, "
                               "op_type, params, inputs, outputs, count}` as the columns of a functional row, "
                               "`count` per module call; what the cost model composes such a module's estimate "
                               "from (`opcost.analysis.composed`); missing for every other row", optional=True),
    ),
)

CONFIGS = Table(
    "configs", "results/db/configs.parquet",
    "The union of all operator configurations of all workloads, one row per (config_id); the profiling work list.",
    (
        _c("config_id", "string", "as in `layers`"),
        _c("op", "string", "as in `layers`"),
        _c("op_type", "string", "as in `layers`"),
        _c("scope", "string", "as in `layers`"),
        _c("mode", "string", "as in `layers`, a decode step's: `inference` (`op_mode`)"),
        _c("params", "string", "as in `layers`"),
        _c("inputs", "string", "as in `layers`"),
        _c("replay", "string", "as in `layers` (from the first workload that has the configuration)"),
        _c("models", "string", "JSON list of the models that use the configuration"),
        _c("workload", "string", "the first workload (`model/mode/b{batch}`) that has the configuration: "
                                 "profiling rotates it among that workload's other configurations"),
        _c("workloads", "string", "JSON object: every workload that calls the configuration -> its calls per "
                                  "iteration there (a workload that is no configuration's `workload` has its model "
                                  "iteration timed in the rotations of its configurations)"),
        _c("order", "Int64", "as in `layers`, in `workload`"),
        _c("positions", "string", "as in `layers`, in `workload`"),
        _c("releases", "string", "as in `layers`, in `workload`"),
        _c("feeds", "string", "as in `layers`, in `workload`"),
    ),
)

MEASUREMENTS = Table(
    "measurements", "results/db/measurements.parquet",
    "Isolated (and later in-situ) timings of operator configurations.",
    (
        _c("config_id", "string", "operator configuration (see `configs`)"),
        _c("op_type", "string", "as in `layers`"),
        _c("mode", "string", "as in `layers`"),
        _c("source", "string", "`isolated` (microbenchmark of the configuration, in a rotation with its "
                               "workload's other configurations), `insitu` (timed inside "
                               "real model iterations, all configurations at once), `coplace` (leaf-module "
                               "calls timed inside real inference iterations under their placements, several "
                               "layers co-placed per run; `workload` set like in-situ rows), or `in_order` and "
                               "`alone` (a profiled workload's configurations timed in one job in a rotation in "
                               "model order, then each in a rotation of its own, as a sweep point's chain times "
                               "it: their difference translates a sweep point's cost into a cost inside a model, "
                               "opcost.analysis.in_model)"),
        _c("phase", "string", "`forward`, or `backward` (training only: the backward work the configuration causes)"),
        _c("workload", "string", "in-situ rows: the workload they were timed in (`model/mode/b{batch}`); "
                                 "missing for isolated rows"),
        _c("status", "string", "`ok`, or `failed: <reason>` (statistics then missing)"),
    ) + _HOST + (
        _c("placement_verified", "string", "forward rows: where the tensors were found after the measurement, "
                                           "same form as `placement` (tier names; `mixed(...)` or `unverified: "
                                           "<why>` per tensor where pages could not be attributed); missing for "
                                           "`default` and backward rows"),
        _c("placement_ok", "boolean", "every tensor verified on its requested tier; false rows are flagged, "
                                      "not dropped; missing where not verified"),
        _c("baseline", "boolean", "`default` placement, or every tensor on the fast (first configured) tier: "
                                  "the rows predictions and the coverage loop use (where a configuration has both a "
                                  "rotation row, cache `fresh`/`rotation`, and a back-to-back all-fast-tier "
                                  "reference of its placements, they use the rotation row)"),
        _c("cache", "string", "isolated rows: `fresh` (timed in rotation with the job's other configurations, one "
                              "call at a time, inputs rewritten just before each call), `rotation` (the same "
                              "without the rewrite), `warm` (back-to-back calls, the same inputs every call), "
                              "`cold:N` (back-to-back, inputs rotate over N "
                              "copies, together larger than twice the last-level cache) or `cold-capped:N` (the "
                              "64-copy cap left the pool smaller); missing for in-situ rows"),
        _c("engine_s", "Float64", "isolated backward rows: the autograd engine's fixed cost per backward call, "
                                  "measured in the row's own rotation (alone, by the same job, for rows measured "
                                  "back-to-back) and taken out of this row's statistics and samples (floored at 0); "
                                  "a training iteration pays it once, so predictions add it once per iteration (op "
                                  "type `autograd engine`); missing elsewhere"),
    ) + _STATS + _ENERGY,
)

SAMPLES = Table(
    "samples", "results/profile/iter{n}_samples_{chunk}.parquet",
    "Raw timing samples behind `measurements` and `e2e` rows.",
    (
        _c("key", "string", "config_id, or `model/mode/b{batch}` for end-to-end rows"),
        _c("source", "string", "as in `measurements`, or `e2e` (`plain` for the `e2e` rows of method `plain`)"),
        _c("placement", "string", "as in `measurements` (`default` for end-to-end rows)"),
        _c("phase", "string", "as in `measurements` (`iteration` for end-to-end rows)"),
        _c("i", "Int64", "sample index in measurement order"),
        _c("seconds", "Float64", "seconds per call in this sample"),
    ),
)

E2E = Table(
    "e2e", "results/e2e/{model}/{mode}_b{batch}.parquet, results/e2e/{model}/{mode}_b{batch}.on_{tier}.parquet, "
    "results/insitu/{model}/{mode}_b{batch}.e2e.parquet, results/profile/iter{n}_e2e_{chunk}.parquet",
    "End-to-end timings of whole model iterations.",
    _MODEL_KEY + (
        _c("method", "string", "`dedicated`: the e2e job, adaptive timing core; `interleaved`: unobserved "
                               "iterations alternating with the in-situ job's timed iterations, so that both see "
                               "the same machine state; `rotation`: the model iteration, after a lead-in of its own "
                               "(about 5 ms), that ends every `profile.e2e_every`-th round of a profiling job's "
                               "rotation (one row per rotation), in the same minutes as the isolated operator "
                               "costs; `tier`: as `dedicated`, with the job's memory bound to a slower NUMA "
                               "tier (`placement`); "
                               "`plain`: right after `dedicated`, in a child process with none of opcost's "
                               "process settings but the thread count (glibc's default allocator, threads not "
                               "pinned), as a user's own script runs the model, its blocks of iterations timed in "
                               "turn with the e2e job's own (`opcost.measure.plain`, `vs_opcost`); never a "
                               "reference of predictions; `control`: a `predict_only` workload timed in turn with "
                               "profiled controls, round after round, one row per control (`opcost.measure.control`, "
                               "`control`, `vs_control`)"),
    ) + _HOST + _STATS + _ENERGY + (
        _c("timed_s", "Float64", "`rotation` rows: sum over the configurations the rotation timed of calls per "
                                 "iteration x median, seconds: the part of the isolated prediction measured in "
                                 "these minutes, the row's weight in the pooled reference; missing otherwise"),
        _c("placement_verified", "string", "`tier` rows: where the inputs, the parameters and buffers, and the "
                                           "leaf modules' outputs of one more iteration were found, in the form of "
                                           "`placement` (`+` joins several places found in one group); missing "
                                           "otherwise"),
        _c("vs_opcost", "Float64", "`plain` rows: the plain process's iteration time over opcost's own, the median "
                                   "of the ratios of blocks of iterations the two processes timed alternately in the "
                                   "same seconds (the host's drift cancels); missing otherwise",
           optional=True),
        _c("control", "string", "`control` rows: the control's workload (`model/mode/b{batch}`), a profiled one "
                                "timed in turn with this one; missing otherwise", optional=True),
        _c("vs_control", "Float64", "`control` rows: the median over rounds of this workload's time over the "
                                    "control's, timed in the same seconds (the host's drift cancels); missing "
                                    "otherwise", optional=True),
        _c("faults", "Float64", "`plain` rows: minor page faults per iteration the plain process takes beyond "
                                "opcost's own (fresh pages of large activations that glibc's default allocator maps "
                                "and returns at every iteration), counted over three iterations after the warm-up; "
                                "missing otherwise", optional=True),
        _c("fault_s", "Float64", "`plain` rows: seconds one page fault costs on this host at the config's thread "
                                 "count (`opcost.measure.memory.fault_cost_s`, measured in the same job); "
                                 "`faults` x `fault_s`: what the faults cost the plain process per iteration, "
                                 "reported beside `vs_opcost` as its likely cause; missing otherwise",
           optional=True),
    ),
)

OVERHEADS = Table(
    "overheads", "results/db/overheads.parquet",
    "The CPU overhead between operators that isolated costs lack (the Python of the model's own code between its "
    "operators), modelled per workload from its trace (`opcost.analysis.predict.trace_overhead`): what `opcost "
    "predict` adds per operator call to a workload the database never measured.",
    _MODEL_KEY + (
        _c("device", "string", "as in `e2e`"),
        _c("threads", "Int64", "as in `e2e`: the workload's end-to-end measurement (the trace ran in the same run)"),
        _c("host", "string", "as in `e2e`"),
        _c("calls", "Float64", "operator calls per iteration: sum of `count` over the workload's `layers` rows"),
        _c("overhead_s", "Float64", "modelled overhead per iteration, seconds"),
        _c("timestamp", "string", "UTC time of the end-to-end measurement the host and threads come from"),
        _c("run", "string", "as in `e2e`", optional=True),
    ),
)

CONSISTENCY = Table(
    "consistency", "results/validation/consistency.parquet",
    "Isolated vs in-situ timing of the same configuration in the same workload.",
    (
        _c("workload", "string", "`model/mode/b{batch}`"),
        _c("config_id", "string", "operator configuration"),
        _c("op_type", "string", "as in `layers`"),
        _c("phase", "string", "as in `measurements`"),
        _c("count", "Int64", "calls per iteration in the workload"),
        _c("isolated_s", "Float64", "isolated median seconds per call"),
        _c("insitu_s", "Float64", "in-situ median seconds per call"),
        _c("ratio", "Float64", "isolated_s / insitu_s"),
        _c("isolated_rel_iqr", "Float64", "IQR / median of the isolated samples"),
        _c("insitu_rel_iqr", "Float64", "IQR / median of the in-situ samples (single calls over iterations)"),
    ),
)

PREDICTIONS = Table(
    "predictions", "results/validation/predictions.parquet (and unseen.parquet: the `predict_only` workloads)",
    "Prediction = sum over configurations of count x cost per call, against the measured end-to-end time; cost "
    "and end-to-end time are the same `statistic` of their samples.",
    _MODEL_KEY + (
        _c("device", "string", "device of both the operator and end-to-end measurements"),
        _c("source", "string", "measurement source of the operator costs (`isolated` or `insitu`); "
                               "`<source>+overhead`: the same sum plus the CPU overhead modelled from the "
                               "workload's trace (`overhead_s`); `estimated`: a `predict_only` workload "
                               "predicted from the database without profiling it (results/validation/"
                               "unseen.parquet; `overhead_s`: the overhead per call modelled from the "
                               "database's workloads, see `overheads`)"),
        _c("statistic", "string", "per-call statistic summed and compared (config `statistic`): `trimmed_mean` "
                                  "(`trimmed_mean_s`: the mean within 3 standard deviations; means add up) or "
                                  "`median` (`median_s`)"),
        _c("placement", "string", "placement of the operator costs: `default` (no tiers configured) or `baseline` "
                                  "(every tensor on the fast tier)"),
        _c("overhead_s", "Float64", "`+overhead` rows: modelled overhead per iteration from the trace (calls per "
                                    "top-level op type x its mean gap T1, plus the gap after the last op), "
                                    "seconds; missing otherwise"),
        _c("predicted_s", "Float64", "sum of count x `statistic` per call over measured configurations (plus "
                                     "`overhead_s`), seconds"),
        _c("measured_s", "Float64", "end-to-end `statistic` of the iteration times, seconds, of the `reference` "
                                    "method"),
        _c("reference", "string", "the `e2e` method measured_s comes from, the first present of: isolated "
                                  "sources `rotation` (the model iterations timed inside the profiling jobs' "
                                  "rotations, pooled: averaged with weights `timed_s`), `dedicated`, "
                                  "`interleaved`; in-situ sources `interleaved`, `dedicated`, `rotation`; a "
                                  "`predict_only` workload's (source `estimated`): `control`, the median over its "
                                  "controls of its time in turn with one times that one's reference (`opcost."
                                  "measure.control`), else `dedicated`"),
        _c("reference_spread", "Float64", "`rotation` references: how far the workload's end-to-end time moved "
                                          "between the rotations that timed it (largest / smallest - 1), the "
                                          "machine's own noise over the run; missing for other references or a "
                                          "single rotation"),
        _c("ratio", "Float64", "predicted_s / measured_s"),
        _c("error", "Float64", "ratio - 1 (signed relative error)"),
        _c("error_plain", "Float64", "the prediction against a plain process of the user's (`e2e` method `plain`): "
                                     "(1 + error) / `vs_opcost` - 1, the reference's error and the gap of the two "
                                     "processes timed in turn, both free of the host's drift; missing where the "
                                     "workload has no plain row timed in turn", optional=True),
        _c("configs", "Int64", "operator configurations in the workload"),
        _c("configs_measured", "Int64", "configurations with an `ok` measurement"),
        _c("calls_covered", "Float64", "fraction of the workload's operator calls with a measurement"),
        _c("predicted_j", "Float64", "sum of count x energy_j over configurations with energy; missing without "
                                     "a meter"),
        _c("measured_j", "Float64", "end-to-end joules per iteration; missing without a meter"),
        _c("low_s", "Float64", "`estimated` rows: lower end of the prediction's interval (opcost.analysis.estimate), "
                               "seconds; missing otherwise"),
        _c("high_s", "Float64", "`estimated` rows: upper end of the interval, seconds; missing otherwise"),
        _c("estimated_share", "Float64", "`estimated` rows: share of the operator time that the cost model "
                                         "estimated (the rest measured); missing otherwise"),
    ),
)

TIER_COSTS = Table(
    "tier_costs", "results/validation/tiers.parquet",
    "The whole model on each slower memory tier, predicted from the isolated placement measurements "
    "(`opcost.analysis.tiers`): Σ count x cost per call x the configuration's slowdown with its tensors on the "
    "tier, and on CPU NUMA tiers the same workload timed end to end with its memory on the tier.",
    _MODEL_KEY + (
        _c("device", "string", "as in `predictions`"),
        _c("tier", "string", "the slower tier (a name of config `placement.tiers` other than the first)"),
        _c("scenario", "string", "what is on the tier: `activations` (the operators' inputs and outputs; "
                                 "parameters and buffers on the fast tier), `weights` (parameters and buffers only) "
                                 "or `all` (every tensor); `weights` and `all` where parameters were placed "
                                 "(config `placement.params: vary`)"),
        _c("placement", "string", "the placement class (as in figures/placement.png) of the scenario's "
                                  "placements of the configurations with parameters, e.g. `in:<tier> out:<tier>`; "
                                  "on GPUs outputs stay on the fast tier"),
        _c("statistic", "string", "as in `predictions`"),
        _c("baseline_s", "Float64", "Σ count x cost per call with every tensor on the fast tier: the `isolated` "
                                    "prediction's operator sum, seconds"),
        _c("predicted_s", "Float64", "Σ count x cost per call x slowdown on the tier, seconds"),
        _c("slowdown", "Float64", "predicted_s / baseline_s"),
        _c("measured_share", "Float64", "share of baseline_s whose configurations' slowdowns in the scenario "
                                        "were measured, or that the scenario does not move (the rest take their "
                                        "op type's median slowdown)"),
        _c("configs", "Int64", "operator configurations with a cost in the workload"),
        _c("configs_measured", "Int64", "of them, those with every phase's slowdown on the tier measured"),
        _c("measured_s", "Float64", "end-to-end `statistic` of the iteration with the job's memory on the tier "
                                    "(the newest `e2e` row of method `tier`), seconds; missing where none ran (GPU "
                                    "tiers, a tier this host lacks)"),
        _c("measured_slowdown", "Float64", "measured_s / the newest `dedicated` end-to-end time on the fast tier"),
        _c("error", "Float64", "slowdown / measured_slowdown - 1: how far the predicted slowdown is off the one "
                               "measured end to end"),
        _c("placement_ok", "boolean", "the tier run found its inputs, activations and parameters where they were "
                                      "asked to be (`e2e` `placement_verified`); missing without a run"),
    ),
)

FAILURES = Table(
    "failures", "results/failures/{stage}/{model}/{mode}_b{batch}.parquet, results/failures.tsv",
    "What could not be done, one row per failure: a workload that could not be built or run in a stage, or one "
    "operator configuration that could not be replayed or timed; and the warnings of workloads that ran but whose "
    "costs are suspect (`kind` `warning`). The rest of the run goes on without a failed one; "
    "`results/failures.tsv` lists every failure of the run (profiling failures come from `measurements` rows "
    "whose status is `failed: ...`).",
    (
        _c("stage", "string", "the stage that failed: `extract`, `e2e`, `e2e_tier` (timed on a slower tier), "
                              "`insitu`, `trace`, `coplace`, `profile`"),
        _c("workload", "string", "`model/mode/b{batch}`"),
        _c("config_id", "string", "the operator configuration that failed; missing when the whole workload failed"),
        _c("op_type", "string", "its operator type; missing when the whole workload failed"),
        _c("reason", "string", "one line: the error"),
        _c("kind", "string", "`failed` (the run went on without it; missing in files of older versions: failed) or "
                             "`warning`: the workload ran and was measured, but its costs are suspect "
                             "(opcost.model.sanity: non-finite outputs, inputs changed in place, operators that change "
                             "between iterations)"),
    ),
)

GENERATE = Table(
    "generate", "results/validation/generate.parquet (config `generate`)",
    "Hugging Face generate() of each decoder model, predicted from the database (`opcost.analysis.generate`: the "
    "prefill, each decode step at its own context, generate()'s own loop) against generate() itself timed in "
    "turn with the model's measured decode step, so that the host's drift since the database's minutes cancels.",
    (
        _c("model", "string", "model name (config key under `models`)"),
        _c("batch", "Int64", "sequences generated together"),
        _c("prompt", "Int64", "prompt length, tokens per sequence"),
        _c("new", "Int64", "tokens generated per sequence (min_new_tokens = max_new_tokens, greedy)"),
        _c("device", "string", "as in `predictions`"),
        _c("predicted_s", "Float64", "predicted seconds of the whole generate() call"),
        _c("low_s", "Float64", "the prediction's interval, low end, seconds"),
        _c("high_s", "Float64", "the prediction's interval, high end, seconds"),
        _c("ttft_s", "Float64", "predicted time to the first token: the prefill and generate()'s setup, seconds"),
        _c("tpot_s", "Float64", "predicted time per output token after the first, seconds; missing for one token"),
        _c("tokens_per_s", "Float64", "predicted tokens per second, batch x new / predicted_s"),
        _c("estimated_share", "Float64", "share of the predicted operator time estimated by the cost model"),
        _c("loop_s", "Float64", "generate()'s own loop in predicted_s (measured on a one-layer stand-in), seconds"),
        _c("bound_s", "Float64", "the decode steps' memory bound: Σ over steps of the bytes they must read "
                                 "(weights, key/value cache) over the host's read bandwidth at that size, seconds"),
        _c("measured_s", "Float64", "generate() timed, in the minutes of the control's database time: the median "
                                    "over rounds of its time / the control's, times the control's time, seconds"),
        _c("measured_ttft_s", "Float64", "generate() of one token timed likewise, seconds"),
        _c("measured_now_s", "Float64", "generate() as timed now (the host's drift since included), seconds"),
        _c("spread", "Float64", "how far the rounds' ratios lie apart (largest / smallest - 1)"),
        _c("control", "string", "the measured workload timed in turn (`model/mode/bN`)"),
        _c("error", "Float64", "predicted_s / measured_s - 1"),
    ),
)

CALIBRATION = Table(
    "calibration", "results/db/calibration.parquet (config `predict_only`)",
    "The `predict_only` workloads' errors, predicted from the database beside it as `opcost predict` predicts a model "
    "never profiled: the interval of such a prediction rests on them (`opcost.analysis.calibration`). Rows predicted "
    "from other files than the database's own (a rerun stage, `opcost db merge`) are not used.",
    _MODEL_KEY + (
        _c("conditions", "string", "the measurement conditions predicted on (`host=.../device=.../threads=...`)"),
        _c("predicted_s", "Float64", "the prediction, seconds"),
        _c("measured_s", "Float64", "the workload's end-to-end time, seconds (as in `predictions`)"),
        _c("log_error", "Float64", "log(predicted_s / measured_s)"),
        _c("estimated_share", "Float64", "share of the predicted operator time estimated by the cost model"),
        _c("database", "string", "fingerprint of the database files predicted from (their size and SHA-1)"),
    ),
)

ALL = (LAYERS, CONFIGS, MEASUREMENTS, SAMPLES, E2E, OVERHEADS, CONSISTENCY, PREDICTIONS, TIER_COSTS, GENERATE,
       CALIBRATION, FAILURES)


def markdown() -> str:
    """The data-contract document (docs/data.md)."""
    out = [
        "# opcost data contracts",
        "",
        "Generated from `src/opcost/tables.py` and `src/opcost/queries.py` by `opcost schema > docs/data.md`; a test",
        "keeps them identical, and tests/test_data_examples.py runs the examples below.",
        f"Schema version: {SCHEMA_VERSION} (stored in each Parquet file's metadata as `opcost_schema`).",
        "",
        "Tensor specs in JSON columns: `{\"T\": shape, \"dtype\": \"float32\", \"stride\": [...], \"grad\": bool}`.",
        "Missing values are nulls, never 0.",
        "",
        "The cost model of `opcost predict` (`opcost.analysis.costmodel`) is kept outside the database, in the",
        "user's cache folder (`$OPCOST_CACHE`, else `~/.cache/opcost`), one file per database folder: one fit per",
        "set of measurement conditions (host, device, threads) and statistic, with a fingerprint of the measurement",
        "rows it was fitted to; it is refitted whenever they change, and after `opcost db merge`. Commands that read",
        "a database never write into it.",
        "",
        *queries.MARKDOWN,
    ]
    for t in ALL + trace_tables.ALL:
        out += ["", f"## `{t.name}`", "", f"`{t.path}` — {t.doc}", "", "| column | type | meaning |", "|---|---|---|"]
        out += [f"| `{c.name}` | {c.dtype} | {c.doc} |" for c in t.columns]
    out += ["", *PLAN_FILE]
    return "\n".join(out) + "\n"


PLAN_FILE = [  # the placement plan file's contract (opcost.analysis.advise.advise writes it)
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
