"""Each configuration of a profiled workload measured alone: in a rotation of its own, every call after a call of
itself, as a sweep point's chain of identical layers measures its operator (:mod:`opcost.model.sweep_points`).

Inside its model an operator follows other operators, which leave the caches, the thread pool and the code as
they used them; after a call of itself it finds its own weights, inputs and code where it left them. The two differ
most for small operators: on this project's 2-core VM, summed over the configurations of MobileNetV3-Large and
RegNetX-016 at batch 1, alone over in model order, convolutions 0.93, BatchNorm2d 0.46, ReLU 0.41, Hardswish 0.58,
global average pooling 0.20 (benchmarks/records/measurements.md). The same configurations measured both ways tell
the cost model how a sweep point's cost translates to a cost inside a model
(:mod:`opcost.analysis.in_model`). Both ways are timed in the same job, seconds apart: the workload's
configurations in one rotation in model order (source :data:`IN_ORDER`), then each alone (source :data:`SOURCE`),
so that the host's drift between jobs (10% and more on a shared VM) does not enter their difference; the default
placement only. A few seconds per workload (ResNet-18 at batch 1: 29 configurations alone in 4 s)."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from opcost.measure.placement import Settings as PlacementSettings
from opcost.measure.profile import profile_configs
from opcost.measure.profiling import ProfileSettings

SOURCE = "alone"  # the `measurements` source of a configuration timed in a rotation of its own
IN_ORDER = "in_order"  # ... and of the same configuration timed in model order in the same job


def profile_alone(configs: pd.DataFrame, models_cfg: dict, device: str, dtype: str,
                  settings: ProfileSettings) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(`measurements` rows, `samples` rows) of every configuration of ``configs`` (a workload's catalogue) timed
    with ``settings`` (placement: the default only) in one rotation in model order (source :data:`IN_ORDER`), then
    each in a rotation of its own (source :data:`SOURCE`)."""
    if configs.empty:  # a workload whose extraction failed (recorded there)
        return pd.DataFrame(), pd.DataFrame()
    settings = replace(settings, placement=PlacementSettings())
    m, s = profile_configs(configs, models_cfg, device, dtype, settings)
    meas, samples = [m.assign(source=IN_ORDER)], [s.assign(source=IN_ORDER)]
    for cid in configs["config_id"]:
        m, s = profile_configs(configs[configs["config_id"] == cid], models_cfg, device, dtype, settings)
        meas.append(m.assign(source=SOURCE))
        samples.append(s.assign(source=SOURCE))
    return pd.concat(meas, ignore_index=True), pd.concat(samples, ignore_index=True)
