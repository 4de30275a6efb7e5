import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # makes `tests.tiny_models:make_mlp` importable as a `module:callable` model
    sys.path.insert(0, str(ROOT))


# the cost models fitted by the tests' runs and commands go to a cache folder of the test session (they inherit it)
os.environ.setdefault("OPCOST_CACHE",
                      os.path.join(os.environ.get("TMPDIR", "/tmp"), f"opcost-test-cache-{os.getuid()}"))

TINY_RUN = "tiny"  # the shared tiny run's folder, in the session's temporary folder


def _tiny_args() -> tuple:
    from tests.helpers import TINY

    return "--configfile", str(TINY), "--cores", "1"


def pytest_sessionstart(session):
    """A parallel session (`make test`: pytest-xdist's workers) starts the tiny run at once, beside the workers, so
    that no worker waits for it (:func:`tiny_run`)."""
    config = session.config
    if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(config.option, "numprocesses", None):
        return
    from tests.helpers import command

    work = config._tmp_path_factory.getbasetemp() / TINY_RUN  # the workers' folders are under this one
    work.mkdir()
    cmd, env = command(*_tiny_args())
    # Snakemake logs to stderr, in order; its exit status, once it ends, goes to `rc` (written whole, then renamed)
    script = '"$@" > /dev/null 2> snakemake.out; echo $? > rc.tmp; mv rc.tmp rc'
    config._opcost_tiny = subprocess.Popen(["sh", "-c", script, "sh", *cmd], cwd=work, env=env,
                                           start_new_session=True)


def pytest_collection_modifyitems(session, config, items):
    """The files whose tests read the tiny run go last (each file's tests in their order), so that in a parallel
    session the workers run the others while the session's tiny run goes on beside them."""
    late = {item.path for item in items if "tiny_run" in getattr(item, "fixturenames", ())}
    items.sort(key=lambda item: item.path in late)


def pytest_sessionfinish(session):
    proc = getattr(session.config, "_opcost_tiny", None)
    if proc is not None and proc.poll() is None:  # no test of the session needed it: stopped with its jobs
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """One real run of the whole workflow on the tiny config, shared by the tests that read its results and by the
    processes of a parallel session: started by the session itself there (:func:`pytest_sessionstart`), else by the
    first test that needs it."""
    from tests.helpers import snakemake

    root = tmp_path_factory.getbasetemp()
    shared = root.parent / TINY_RUN
    if os.environ.get("PYTEST_XDIST_WORKER") and shared.is_dir():
        return _started(shared)
    work = root / TINY_RUN
    work.mkdir()
    proc = snakemake(*_tiny_args(), cwd=work)
    (work / "snakemake.out").write_text(proc.stderr)
    return work


def _started(work: Path, timeout: float = 900.0) -> Path:
    """The tiny run the session started in ``work``, once its exit status is there (``rc``)."""
    rc, t0 = work / "rc", time.monotonic()
    while not rc.exists():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"the tiny run in {work} did not finish in {timeout:.0f} s")
        time.sleep(1)
    if rc.read_text().strip() != "0":
        raise AssertionError(f"the tiny run failed:\n{(work / 'snakemake.out').read_text()[-3000:]}")
    return work


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield
