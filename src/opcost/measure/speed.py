"""The host's speed in a rotation's own seconds: one fixed call timed in every round of every profiling rotation.

On a shared host the speed drifts by a quarter or more within minutes (a vCPU lent elsewhere makes two-thread calls
wait for their slow thread), so that costs measured in different rotations (a job's groups, the sweep points' jobs,
the models' jobs, minutes apart) are not in one minute, and an estimate that adds a sweep point's cost to a model's
configuration's inherits their difference. The probe, a 3x3 convolution of 64 channels at 28x28 (batch 1, about
0.2 ms on a 2-core host, two-thread work like the costs it stands beside), rotates as one more member of each
rotation; its median is each row's `speed_s` (`measurements`, `e2e` rows of method `rotation`), and
:mod:`opcost.analysis.speed` reads a database's rows in one minute: each divided by its rotation's speed over the
database's median speed.
"""
from __future__ import annotations

from typing import Callable

import torch

PROBE_INPUT = (1, 64, 28, 28)  # batch, channels, height, width
PROBE_KERNEL = 3


def speed_probe(device: str = "cpu", dtype: torch.dtype = torch.float32) -> Callable[[], torch.Tensor]:
    """The probe's call (its tensors made here, seeded: the same on every host and job)."""
    gen = torch.Generator().manual_seed(0)
    c = PROBE_INPUT[1]
    x = torch.randn(PROBE_INPUT, generator=gen, dtype=dtype).to(device)
    w = torch.randn((c, c, PROBE_KERNEL, PROBE_KERNEL), generator=gen, dtype=dtype).to(device)

    def probe() -> torch.Tensor:
        return torch.nn.functional.conv2d(x, w, padding=PROBE_KERNEL // 2)

    return probe
