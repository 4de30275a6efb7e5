"""The GPU iteration as two timelines (opcost.analysis.critical_path) on hand-made call sequences: a launch-bound
one, a device-bound one, a mixed one with a synchronising call, checked against the times worked out by hand."""
import pytest

from opcost.analysis.critical_path import Call, walk

US = 1e-6


def test_launch_bound_sequence_ends_one_kernel_after_the_cpu():
    """Small kernels behind slow issuing: the device idles between them, the iteration is the CPU's work plus the
    last kernel."""
    w = walk([Call(gap_s=5 * US, host_s=10 * US, device_s=2 * US)] * 10)
    assert w.iteration_s == pytest.approx(152 * US)
    assert w.cpu_busy_s == pytest.approx(150 * US) and w.device_busy_s == pytest.approx(20 * US)
    assert w.device_idle_s == pytest.approx(132 * US) and w.bound == "launch"


def test_device_bound_sequence_is_the_first_launch_plus_every_kernel():
    """Long kernels: the CPU issues all of them early and waits at the end; the device never idles after the
    first launch."""
    w = walk([Call(gap_s=1 * US, host_s=4 * US, device_s=100 * US)] * 10, tail_s=3 * US)
    assert w.iteration_s == pytest.approx(1008 * US)  # the tail comes after the final synchronisation
    assert w.cpu_busy_s == pytest.approx(53 * US) and w.cpu_wait_s == pytest.approx(1005 * US - 50 * US)
    assert w.bound == "device"


def test_a_synchronising_call_makes_the_cpu_wait_and_the_device_idle_after():
    """A long kernel, then a call that reads its result (.item()): the CPU waits for the device, and the next
    kernel cannot be queued before the CPU issues it."""
    heavy = Call(gap_s=0.0, host_s=5 * US, device_s=100 * US)
    item = Call(gap_s=0.0, host_s=5 * US, device_s=1 * US, sync=True)
    w = walk([heavy, item, heavy])
    # heavy: queued at 5, runs to 105; item: queued at 10, runs 105-106, the CPU waits from 10 to 106;
    # heavy again: issued 106-111, runs 111-211
    assert w.iteration_s == pytest.approx(211 * US)
    assert w.cpu_wait_s == pytest.approx(96 * US + 100 * US)
    assert w.device_idle_s == pytest.approx(211 * US - 201 * US)
    assert w.bound == "device"
    # the per-call maximum of host and device time, which lets neither side run ahead, says 205 µs
    assert sum(max(c.host_s, c.device_s) + c.gap_s for c in (heavy, item, heavy)) == pytest.approx(205 * US)


def test_mixed_sequence_and_an_early_launch():
    """Half launch-bound, half device-bound: neither side busy 90% of the time. A kernel queued before its
    call's host work ends (``launch_s``) starts earlier."""
    small = Call(gap_s=10 * US, host_s=10 * US, device_s=1 * US)
    big = Call(gap_s=0.0, host_s=10 * US, device_s=200 * US, launch_s=2 * US)
    w = walk([small] * 10 + [big])
    # small calls: CPU at 200; the big one's kernel queued at 202, runs to 402; its host work ends at 210
    assert w.iteration_s == pytest.approx(402 * US)
    assert w.bound == "mixed"
    assert walk([big]).iteration_s == pytest.approx(202 * US)


def test_nothing_to_walk():
    assert walk([]).iteration_s == 0.0


def test_a_gpu_workload_of_the_h200_fixture_is_walked_in_its_call_order():
    """The isolated device costs of resnet18 at batch 8 measured on an H200 (tests/data/h200), walked with a
    trace's host time and gap per call: slow issuing makes it launch-bound (the CPU's work plus one kernel), fast
    issuing device-bound (the first launch plus every kernel); the `+overhead` prediction on a GPU is that walk."""
    from pathlib import Path

    import pandas as pd

    from opcost.analysis.critical_path import workload_calls
    from opcost.analysis.overhead import OverheadModel
    from opcost.analysis.predict import costed_layers, predict

    data = Path(__file__).parent / "data" / "h200"
    layers = pd.read_parquet(data / "layers.parquet")
    meas = pd.read_parquet(data / "measurements.parquet")
    wl = layers[(layers["model"] == "resnet18") & (layers["mode"] == "inference") & (layers["batch"] == 8)]
    costed = costed_layers(wl, meas, "cuda")
    calls = workload_calls(costed, host_s=100 * US, gap_s=20 * US)
    n, device = len(calls), float(costed["total_s"].sum())
    assert n == int(wl["count"].sum()) and sum(c.device_s for c in calls) == pytest.approx(device)
    slow = walk(calls, 0.0)
    assert slow.bound == "launch" and slow.iteration_s == pytest.approx(n * 120 * US + calls[-1].device_s, rel=1e-9)
    fast = walk(workload_calls(costed, host_s=0.1 * US, gap_s=0.0), 0.0)
    assert fast.bound == "device" and fast.iteration_s == pytest.approx(0.1 * US + device, rel=1e-6)
    from opcost import tables

    e2e = tables.frame(tables.E2E, [])
    model = OverheadModel(t1={}, t1_default=20 * US, tail=5 * US, host_default=100 * US, gpu=True)
    rows = predict(wl, meas, e2e, "cuda", sources=("isolated",),
                   overhead={("resnet18", 8, "inference"): 0.0}, walks={("resnet18", 8, "inference"): model})
    walked = rows[rows["source"] == "isolated+overhead"]["predicted_s"].iloc[0]
    assert walked == pytest.approx(walk(calls, 5 * US).iteration_s)
