"""Energy meters: RAPL against a fake powercap tree (the OS boundary), NVML on real hardware only, none elsewhere."""
import pytest

from opcost.errors import OpcostError
from opcost.measure.energy import EnergySettings, Meter, NoMeter, RaplMeter, detect, measure_energy, missing


def fake_rapl(root, pkg_uj=1_000_000, dram_uj=500, max_range=2_000_000):
    pkg = root / "intel-rapl:0"
    core = pkg / "intel-rapl:0:0"
    dram = pkg / "intel-rapl:0:1"
    for zone, name, uj in ((pkg, "package-0", pkg_uj), (core, "core", 7), (dram, "dram", dram_uj)):
        zone.mkdir(parents=True, exist_ok=True)
        (zone / "name").write_text(name + "\n")
        (zone / "energy_uj").write_text(f"{uj}\n")
        (zone / "max_energy_range_uj").write_text(f"{max_range}\n")
    return pkg, dram


def test_rapl_sums_package_and_dram_and_handles_wraparound(tmp_path):
    pkg, dram = fake_rapl(tmp_path, pkg_uj=1_900_000, dram_uj=100)
    meter = RaplMeter(tmp_path)
    assert meter.available and [z.name for z in meter.zones] == ["intel-rapl:0", "intel-rapl:0:1"]  # not core
    token = meter.begin()
    (pkg / "energy_uj").write_text("300000\n")  # wrapped at 2,000,000: +400,000 uJ
    (dram / "energy_uj").write_text("600\n")  # +500 uJ
    w = meter.end(token)
    assert w.joules == pytest.approx(0.4005) and w.seconds > 0


def test_rapl_unreadable_zone_is_explained(tmp_path):
    pkg, _ = fake_rapl(tmp_path)
    (pkg / "energy_uj").unlink()
    (pkg / "energy_uj").mkdir()  # unreadable as a file
    meter = RaplMeter(tmp_path)
    assert not meter.available and "intel-rapl:0" in meter.reason
    with pytest.raises(OpcostError, match="config: energy.meter: rapl"):
        detect("cpu", "rapl", rapl_root=tmp_path)


def test_no_rapl_means_meter_none_and_missing_values(tmp_path):
    meter = detect("cpu", "auto", rapl_root=tmp_path)  # an empty powercap tree, as in a VM
    assert isinstance(meter, NoMeter) and not meter.available and "no RAPL zones" in meter.reason
    cols = missing(meter)
    assert cols["meter"] == "none" and cols["energy_j"] is None and cols["energy_active_j"] is None


def test_energy_per_call_from_trials(tmp_path):
    pkg, _ = fake_rapl(tmp_path)
    meter = RaplMeter(tmp_path)
    state = {"uj": 1_000_000}

    def op():  # each call "costs" 10 uJ on the fake counter
        state["uj"] += 10
        (pkg / "energy_uj").write_text(f"{state['uj']}\n")

    out = measure_energy(op, meter, EnergySettings(trial_s=0.05, trials=3), idle_w=0.0)
    assert out["energy_j"] == pytest.approx(10e-6) and out["energy_spread"] == pytest.approx(0.0, abs=1e-9)
    assert out["energy_active_j"] == pytest.approx(10e-6) and out["meter"] == "rapl"


def test_nvml_on_a_real_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this host: the NVML path is verified on GPU machines only")
    pytest.importorskip("pynvml", reason="nvidia-ml-py not installed")
    meter = detect("cuda", "nvml")
    token = meter.begin()
    x = torch.randn(4096, 4096, device="cuda")
    for _ in range(50):
        x @ x
    torch.cuda.synchronize()
    assert meter.end(token).joules > 0


class _Clock:
    """A virtual clock standing in for the energy module's ``time``: ``sleep`` advances it, so a window lasts exactly
    what it asks for whatever the load on the host (a real clock on a busy CI host let the first window run past the
    schedule's first step)."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _CoolingDevice(Meter):
    """A meter whose counter is the exact integral of a power schedule (watts against seconds of the clock)."""

    name, available = "fake", True

    def __init__(self, schedule, clock, step=1e-4):
        self.schedule, self.clock, self.step = schedule, clock, step

    def read(self) -> float:
        t, joules, now = 0.0, 0.0, self.clock.now
        while t < now - 1e-12:
            dt = min(self.step, now - t)
            joules += self.schedule(t) * dt
            t += dt
        return joules


def test_idle_power_waits_for_a_falling_power_to_settle(monkeypatch):
    from opcost.measure import energy

    def cooling(t):  # a device cooling down
        return 200.0 if t < 0.05 else 100.0 if t < 0.1 else 50.0

    clock = _Clock()
    monkeypatch.setattr(energy, "time", clock)
    device = _CoolingDevice(cooling, clock)
    token = device.begin()
    clock.sleep(0.05)
    first = device.end(token).watts  # one window at the start reads the high power
    clock.now = 0.0
    watts = energy.idle_power(device, 0.05)
    assert first == pytest.approx(200.0, rel=0.02) and watts == pytest.approx(50.0, rel=0.02)
    assert clock.now >= 0.15  # it kept reading past the fall


def test_running_below_the_idle_baseline_is_missing_active_energy_not_negative(tmp_path):
    pkg, _ = fake_rapl(tmp_path)
    meter = RaplMeter(tmp_path)
    state = {"uj": 1_000_000}

    def op():
        state["uj"] += 10
        (pkg / "energy_uj").write_text(f"{state['uj']}\n")

    out = measure_energy(op, meter, EnergySettings(trial_s=0.02, trials=2), idle_w=1e9)  # baseline far above
    assert out["energy_j"] == pytest.approx(10e-6) and out["energy_active_j"] is None and out["idle_w"] == 1e9
