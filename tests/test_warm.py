"""A job's script handed to a warm process (opcost.warm): it runs as the job would in a fresh process (directory,
environment, command line, streams, exit status), in a fork that nothing of another job reaches, and a stopped or
killed job takes its fork with it."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import ROOT

JOB = """
from opcost.warm import hand_over
hand_over()
import json, os, sys
import numpy as np
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(), "x": os.environ.get("X"),
                  "argv": sys.argv[1:], "torch": "torch" in sys.modules, "draw": float(np.random.rand())}))
sys.exit(int(sys.argv[1]))
"""

SLEEPER = """
from opcost.warm import hand_over
hand_over()
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(os.getpid(), child.pid, flush=True)
time.sleep(60)
"""


def _env(**extra):
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **extra}


def _job(script, tmp_path, code, **env):
    proc = subprocess.run([sys.executable, str(script), str(code)], cwd=tmp_path, env=_env(**env),
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_job_runs_in_a_fork_of_one_warm_process_as_it_would_alone(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    (rc1, a), (rc2, b) = _job(script, tmp_path, 3, X="one"), _job(script, tmp_path, 0, X="two")
    assert (rc1, rc2) == (3, 0)  # each job's own exit status
    assert a["ppid"] == b["ppid"] and a["pid"] != b["pid"]  # forks of one warm process
    assert a["torch"] and b["torch"]  # imported there once, not by the job
    assert (a["x"], b["x"], a["argv"], b["argv"]) == ("one", "two", ["3"], ["0"])
    assert a["cwd"] == b["cwd"] == str(tmp_path)
    assert a["draw"] != b["draw"]  # numpy's global generator seeded per job, as a fresh process seeds it
    rc, alone = _job(script, tmp_path, 0, OPCOST_WARM="0")
    assert rc == 0 and not alone["torch"] and alone["ppid"] != a["ppid"]  # OPCOST_WARM=0: a process of its own


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_or_killed_job_takes_its_fork_and_what_it_started_with_it(tmp_path, sig):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            text=True)
    fork, started = map(int, proc.stdout.readline().split())
    assert fork != proc.pid
    proc.send_signal(sig)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (_alive(fork) or _alive(started)):
        time.sleep(0.1)
    assert not _alive(fork) and not _alive(started)


def _alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def echo_stdin() -> None:
    """A call a warm process runs (:func:`opcost.warm.command`): its standard input back, its parent's pid, a status."""
    data = sys.stdin.read()
    print(json.dumps({"read": data, "ppid": os.getppid(), "pid": os.getpid()}))
    sys.exit(5)


def test_a_function_run_as_a_process_of_its_own_runs_in_a_warm_fork(tmp_path):
    """What opcost runs in a process of its own (the short trace of a model never traced, the config's checks)
    runs in a fork of the warm process, with its standard streams and exit status, or in a fresh process where
    OPCOST_WARM=0."""
    from opcost import warm

    runs = [subprocess.run(warm.command("tests.test_warm:echo_stdin"), input=text, capture_output=True, text=True,
                           cwd=tmp_path, env=_env(**extra), timeout=120)
            for text, extra in (("one", {}), ("two", {}), ("three", {"OPCOST_WARM": "0"}))]
    got = [json.loads(r.stdout) for r in runs]
    assert [r.returncode for r in runs] == [5, 5, 5] and [g["read"] for g in got] == ["one", "two", "three"]
    assert got[0]["ppid"] == got[1]["ppid"] and got[0]["pid"] != got[1]["pid"]  # forks of one warm process
    assert got[2]["ppid"] != got[0]["ppid"]  # a process of its own
