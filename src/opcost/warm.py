"""Warm processes for the workflow's jobs: a job's script runs in a fork of a process that has already imported
torch, pandas, transformers and timm, instead of importing them again.

Each rule's script starts a fresh Python whose imports take 3-6 s on a small host: a default study's 60-odd jobs
spent minutes importing, more than most of its short jobs spend measuring. A script's first line,
:func:`hand_over`, sends its job to a warm process of this Python, environment and opcost source (:func:`serve`,
started by the first job that finds none, ended after :data:`IDLE_S` seconds without a job): it forks a child that
takes the job's working directory, environment, command line and standard streams and runs the same script file
from its start (where :func:`hand_over` now returns at once); the job's process waits and exits with the child's
status. A signal the job's process gets (Snakemake stopping it) goes to the child's process group; a job's process
that dies outright takes the child with it (the child watches the connection).

The warm process imports only: it never runs an operator, starts no thread pool of torch's and never touches a GPU,
so a child starts as a fresh process would, with the allocator settings, thread counts and pinning its stage sets
itself. Each child is a fork of the unchanged warm process: nothing of one job reaches another. A job runs in its
own fresh process where ``OPCOST_WARM=0``, inside a cluster allocation (``SLURM_JOB_ID``: one job per allocation
gains nothing), for a CUDA device (a CUDA driver initialised before a fork does not work in the child, and an import
may initialise it), where no warm process comes up within :data:`START_S`, or where the platform cannot pass file
descriptors over a Unix socket. The job binding its memory to a NUMA tier (``e2e_tier``) always runs in a fresh
process: its memory policy must hold before torch is imported.
"""
from __future__ import annotations

import hashlib
import os
import socket
import struct
import sys

ENV = "OPCOST_WARM"  # "0": every job in a fresh process of its own
CHILD = "OPCOST_WARM_CHILD"  # set in a child: its script runs on
IDLE_S = 90.0  # a warm process with no job for this long ends
START_S = 60.0  # a job waits this long for a warm process it started, then runs on its own
# what the imports read from the environment (thread pools, devices, allocators, paths): a warm process serves the
# jobs of one such environment
_IMPORT_ENV = ("OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "CUDA_", "NVIDIA_", "PYTORCH_", "TORCH", "HF_",
               "TRANSFORMERS_", "LD_", "PYTHON", "MALLOC_", "VIRTUAL_ENV", "PATH")
_MODULES = ("torch", "numpy", "pandas", "pyarrow", "pyarrow.parquet", "opcost.stages",
            "opcost.measure.profile", "opcost.analysis.estimate", "opcost.report.figures", "transformers", "timm")
_STATUS = struct.Struct("!i")


def _key() -> str:
    """What a warm process must share with a job to run it: the interpreter, opcost's source (a file edited since the
    warm process started makes another one) and the environment the imports read."""
    src = os.path.dirname(os.path.abspath(__file__))
    stamp = max((os.stat(os.path.join(d, f)).st_mtime_ns for d, _, files in os.walk(src) for f in files
                 if f.endswith(".py")), default=0)
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_IMPORT_ENV))
    # not sys.path, which a script's preamble extends: what imports find follows from the interpreter, its prefix
    # and PYTHONPATH (in `env`); a child takes its job's sys.path
    return hashlib.sha1(repr((sys.executable, sys.prefix, src, stamp, env)).encode()).hexdigest()[:16]


def _address(key: str) -> str | None:
    """The warm process's socket, in a folder only this user can enter (None where that folder is not so: another
    user's socket could take the job's streams and environment)."""
    import stat
    import tempfile

    folder = os.path.join(tempfile.gettempdir(), f"opcost-warm-{os.getuid()}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        st = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return os.path.join(folder, f"{key}.sock")


def _wanted(device: str | None = None) -> bool:
    if device is None:
        job = getattr(sys.modules["__main__"], "snakemake", None)  # the job Snakemake's preamble describes
        device = str(((getattr(job, "config", None) or {}).get("device")) or "cpu")
    return (os.environ.get(CHILD) != "1" and os.environ.get(ENV, "1") != "0" and "SLURM_JOB_ID" not in os.environ
            and not device.startswith("cuda") and hasattr(socket, "send_fds") and hasattr(os, "fork"))


def hand_over() -> None:
    """Run this script's job in a warm process and exit with its status (module docstring); return at once in the
    warm process's child, or where no warm process serves (the script then runs here)."""
    if not _wanted():
        return
    script = os.path.abspath(sys.argv[0] if sys.argv else "")  # the file Python runs (Snakemake's copy of the
    if os.path.isfile(script):  # script with its preamble, which sets the script's `__file__` to the original)
        _send({"script": script})


def command(target: str, device: str = "cpu") -> list[str]:
    """The command line that runs ``target`` (``"module:function"``, no arguments: it reads its standard input) as
    a process of its own would, in a fork of the warm process where one serves (not for a CUDA ``device``)."""
    return [sys.executable, "-m", "opcost.warm", "--call", target, "--device", device]


def _call(target: str) -> None:
    import importlib

    module, _, function = target.partition(":")
    getattr(importlib.import_module(module), function)()


def _send(what: dict) -> None:
    """Hand ``what`` (a script or a call) to the warm process and exit with its status; return where none serves."""
    address = _address(_key())
    conn = None if address is None else _connect(address)
    if conn is None:
        return
    import pickle
    import signal

    request = pickle.dumps({**what, "cwd": os.getcwd(), "env": dict(os.environ), "argv": sys.argv,
                            "path": sys.path})
    try:
        socket.send_fds(conn, [struct.pack("!Q", len(request)) + request], [0, 1, 2])
        pid = _read_status(conn)
    except OSError:
        return  # the warm process went away before it forked: run here
    forward = lambda signum, frame: _signal_group(pid, signum)  # noqa: E731
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    try:
        status = _read_status(conn)
    except OSError:
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except OSError:
        pass


def _recv_exact(conn, size: int, data: bytes = b"") -> bytes:
    """``data`` completed to ``size`` bytes from ``conn``; ConnectionError where the other end closes first."""
    while len(data) < size:
        part = conn.recv(size - len(data))
        if not part:
            raise ConnectionError("the other end closed the connection")
        data += part
    return data


def _read_status(conn) -> int:
    return _STATUS.unpack(_recv_exact(conn, _STATUS.size))[0]


def _connect(address: str):
    """A connection to the warm process at ``address``, started if none serves; None where none comes up."""
    import subprocess
    import time

    def attempt():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(address)
            return s
        except OSError:
            s.close()
            return None

    conn = attempt()
    if conn is not None:
        return conn
    env = {k: v for k, v in os.environ.items() if k != CHILD}
    subprocess.Popen([sys.executable, "-m", "opcost.warm", "--serve", address], start_new_session=True, env=env,
                     cwd="/",
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    while time.monotonic() - t0 < START_S:
        time.sleep(0.05)
        conn = attempt()
        if conn is not None:
            return conn
    return None


def serve(address: str) -> None:
    """The warm process: import, then fork a child per job sent to ``address`` until :data:`IDLE_S` seconds pass
    without one. A second warm process for the same address leaves at once (a lock file held for life)."""
    import fcntl
    import importlib
    import threading

    lock = open(address + ".lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return
    for name in _MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  a module this environment lacks: its jobs import what they need
            pass
    if os.path.exists(address):
        os.unlink(address)  # a dead warm process's socket (the lock says none lives)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(address)
    server.listen(64)
    busy = [0]
    guard = threading.Lock()
    try:
        while True:
            server.settimeout(IDLE_S)
            try:
                conn, _ = server.accept()
            except TimeoutError:
                with guard:
                    if busy[0] == 0:
                        return
                continue
            conn.settimeout(None)
            try:
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            except OSError:
                conn.close()
                continue
            request = _whole_request(conn, msg)
            if request is None or len(fds) != 3:
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                server.close()
                lock.close()  # the lock ends with the warm process, whatever a job leaves running
                _child(conn, fds, request)  # never returns
            for fd in fds:
                os.close(fd)
            with guard:
                busy[0] += 1
            threading.Thread(target=_report, args=(conn, pid, busy, guard), daemon=True).start()
    finally:
        server.close()
        for path in (address, address + ".lock"):  # a warm process starting meanwhile makes both again
            if os.path.exists(path):
                os.unlink(path)


def _whole_request(conn, msg: bytes):
    import pickle

    if len(msg) < 8:
        return None
    (size,) = struct.unpack("!Q", msg[:8])
    try:
        return pickle.loads(_recv_exact(conn, size, msg[8:]))
    except ConnectionError:
        return None


def _report(conn, pid: int, busy: list, guard) -> None:
    """Send the child's pid, wait for it, send its exit status (a signal's death as 128 + the signal)."""
    try:
        conn.sendall(_STATUS.pack(pid))
    except OSError:
        pass
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    try:
        conn.sendall(_STATUS.pack(128 - code if code < 0 else code))
    except OSError:
        pass
    conn.close()
    with guard:
        busy[0] -= 1


def _child(conn, fds: list, request: dict) -> None:
    """In the fork: become the job (its streams, directory, environment, command line), run its script, exit."""
    import atexit
    import runpy
    import signal
    import threading
    import traceback

    os.setpgid(0, 0)  # the job's own group: a signal forwarded to it reaches what the job starts
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ[CHILD] = "1"
    sys.argv = list(request["argv"])
    sys.stdout.reconfigure(line_buffering=os.isatty(1))  # as a fresh process buffers its standard output
    sys.path[:] = request["path"]
    if "numpy" in sys.modules:  # a fresh process seeds numpy's global generator from the OS; a fork copies it
        sys.modules["numpy"].random.seed()

    def watch():  # the job's process gone (killed outright): so is the job
        try:
            while conn.recv(1):
                pass
        except OSError:
            pass
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()
    code = 0
    try:
        if "call" in request:
            _call(request["call"])
        else:
            runpy.run_path(request["script"], run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001  what a fresh process would print and exit with
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def main(argv: list[str]) -> None:
    """``--serve ADDRESS``: be the warm process; ``--call MODULE:FUNCTION [--device D]``: run the function, handed to
    the warm process where one serves (:func:`command`)."""
    if argv[:1] == ["--serve"]:
        serve(argv[1])
        return
    target = argv[argv.index("--call") + 1]
    device = argv[argv.index("--device") + 1] if "--device" in argv else "cpu"
    if _wanted(device):
        _send({"call": target})
    _call(target)


if __name__ == "__main__":
    main(sys.argv[1:])
