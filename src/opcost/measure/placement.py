"""Memory placement: named tiers, what the machine has, placing tensors on a tier, and checking where they are.

A *tier* is a named memory in the config (``placement.tiers``) mapped to a backend:

* ``{numa: N}``: CPU NUMA node N. A PMEM (KMEM DAX) or CXL expander appears as a CPU-less node. Tensors are put
  there by allocating anonymous memory, binding it to the node with ``mbind(MPOL_BIND)`` *before first touch*, and
  viewing it with ``torch.frombuffer``; pages are checked with ``move_pages`` (query mode) afterwards.
* ``{cuda: device}``: GPU device memory (the device's own allocator).
* ``{cuda: host}``: pinned host memory mapped into the GPU's address space (zero-copy over the interconnect), used by
  kernels through a device tensor aliasing it.
* ``{cuda: managed}``: ``cudaMallocManaged`` memory, migrated on demand.
GPU pointers are checked with ``cudaPointerGetAttributes``. The syscalls are called directly through libc, so no
libnuma is needed; the first tier listed is the fast tier (the baseline every slowdown is relative to).

A *placement* of one operator configuration gives a tier to each tensor input, to the parameters (module
configurations; held on the fast tier unless ``placement.params: vary``, as AutoTM does) and to the outputs. Its text
form, stored in the ``placement`` column, reads ``in:dram,pmem;w:dram;out:pmem``.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import glob
import itertools
import mmap
import os
import platform
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch

from opcost.errors import OpcostError
from opcost.measure.numa import (MPOL_BIND, MPOL_DEFAULT, MPOL_MF_MOVE, NODE_SYSFS, SYSCALLS, libc, nodemask,
                                 syscall)
from opcost.measure.numa import nodes as numa_nodes

DEFAULT = "default"
PAGE = mmap.PAGESIZE
CUDA_KINDS = ("device", "host", "managed")
_VERIFY_PAGES = 64  # pages sampled per tensor when checking where it lives


@dataclass(frozen=True)
class Tier:
    name: str
    kind: str  # "numa" or "cuda"
    where: str | int  # NUMA node number, or device | host | managed

    def __str__(self) -> str:
        return f"{self.name} ({'NUMA node ' + str(self.where) if self.kind == 'numa' else 'GPU ' + self.where})"


@dataclass(frozen=True)
class Settings:
    """Config `placement`; the defaults are the schema's (a test holds them equal), but for ``tiers``: none, the
    library placing nothing unless told (the workflow's default config names `dram` and `far`)."""
    tiers: tuple[Tier, ...] = ()
    on_missing: str = "skip"
    params: str = "fixed"
    max_per_config: int = 4

    @classmethod
    def from_config(cls, cfg: dict | None) -> "Settings":
        cfg = dict(cfg or {})  # the settings a stage declared (opcost.config.StageConfig); the others at defaults
        tiers = []
        for name, spec in (cfg.get("tiers") or {}).items():
            (kind, where), = spec.items()
            tiers.append(Tier(name, kind, int(where) if kind == "numa" else where))
        return cls(tuple(tiers), cfg.get("on_missing", cls.on_missing), cfg.get("params", cls.params),
                   int(cfg.get("max_per_config", cls.max_per_config)))

    @property
    def enabled(self) -> bool:
        return bool(self.tiers)


# --- discovery -------------------------------------------------------------------------------------------------


def _cpulist(text: str) -> list[int]:
    cpus = []
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus += range(int(lo), int(hi or lo) + 1)
    return cpus


def discover(sysfs: str | Path = NODE_SYSFS) -> dict:
    """What memory this machine has: NUMA nodes (CPUs, memory) and CUDA devices."""
    nodes = []
    for node in numa_nodes(sysfs):
        d = Path(sysfs) / f"node{node}"
        cpus = _cpulist((d / "cpulist").read_text()) if (d / "cpulist").exists() else []
        mem_kb = None
        if (d / "meminfo").exists():
            for line in (d / "meminfo").read_text().splitlines():
                if "MemTotal:" in line:
                    mem_kb = int(line.split()[-2])
        nodes.append({"node": node, "cpus": cpus, "mem_kb": mem_kb, "cpu_less": not cpus})
    gpus = [f"cuda:{i}" for i in range(torch.cuda.device_count())]  # no CUDA context started here
    return {"numa_nodes": nodes, "gpus": gpus, "numa_syscalls": platform.machine() in SYSCALLS}


def missing_reason(tier: Tier, device: str, found: dict) -> str | None:
    """Why ``tier`` cannot be used for ``device`` on this machine, or None when it can."""
    if tier.kind == "numa":
        if device != "cpu":
            return f"tier {tier}: NUMA tiers place CPU tensors, but device is {device}"
        nodes = [n["node"] for n in found["numa_nodes"]]
        if tier.where not in nodes:
            return f"tier {tier}: NUMA node {tier.where} not present on this host (nodes: " \
                   f"{', '.join(map(str, nodes)) or 'none'})"
        if not found["numa_syscalls"]:
            return f"tier {tier}: no mbind/move_pages syscall numbers known for {platform.machine()}"
        return None
    if not device.startswith("cuda"):
        return f"tier {tier}: GPU tiers need a cuda device, but device is {device}"
    if not found["gpus"]:
        return f"tier {tier}: no CUDA device on this host"
    return None


def usable_tiers(settings: Settings, device: str, found: dict | None = None) -> tuple[list[Tier], dict[str, str]]:
    """(tiers usable here, {tier name: why skipped}); with ``on_missing: strict`` a missing tier is an error."""
    found = found or discover()
    ok, skipped = [], {}
    for tier in settings.tiers:
        why = missing_reason(tier, device, found)
        if why is None:
            ok.append(tier)
        elif settings.on_missing == "strict":
            raise OpcostError(f"config: placement.tiers.{tier.name}", why.split(": ", 1)[1]
                              + " (set placement.on_missing: skip to record a skip instead)")
        else:
            skipped[tier.name] = why
    return ok, skipped


# --- placements of one configuration -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    inputs: tuple[str, ...]
    params: str | None
    out: str

    def __str__(self) -> str:
        parts = [f"in:{','.join(self.inputs)}"] if self.inputs else []
        if self.params is not None:
            parts.append(f"w:{self.params}")
        return ";".join(parts + [f"out:{self.out}"])

    def tiers(self) -> list[str]:
        return list(self.inputs) + ([self.params] if self.params is not None else []) + [self.out]

    def all_on(self, tier: str) -> bool:
        """Every tensor on ``tier`` (with the fast tier: the baseline placement)."""
        return set(self.tiers()) == {tier}

    @classmethod
    def parse(cls, text: str) -> "Placement":
        parts = dict(p.split(":", 1) for p in text.split(";"))
        return cls(tuple(parts["in"].split(",")) if parts.get("in") else (), parts.get("w"), parts["out"])


def output_tier(tiers: list[Tier], device: str) -> str | None:
    """The tier every output of a placed call lands on, or None where outputs can be bound to any tier (CPU NUMA
    tiers, :meth:`Placer.bind_output`). On GPUs kernels allocate their outputs through the device allocator, so
    outputs stay in device memory: the fast tier."""
    return tiers[0].name if tiers and str(device).startswith("cuda") else None


def plan(n_inputs: int, has_params: bool, tiers: list[str], params: str = "fixed", cap: int = 8,
         alias: int | None = None, out_tier: str | None = None) -> list[Placement]:
    """The placements to measure for a configuration, at most ``cap``: a sample of the product of tiers over inputs,
    parameters and outputs. First all on the fast (first) tier, then all on each other tier, then placements with one
    tensor off the fast tier, then two, ... (generated lazily: an op with many inputs never enumerates the product).
    With ``params: fixed`` parameters stay on the fast tier, as in AutoTM. The output cannot always go its own way:
    with ``alias`` (an in-place or view op: its output is input ``alias``'s memory) it is on that input's tier, with
    ``out_tier`` (e.g. GPU outputs, which stay in device memory) on that tier; placements that become equal are
    kept once."""
    if not tiers:
        return []
    fast, slow = tiers[0], tiers[1:]
    vary_w = has_params and params != "fixed"
    slots = n_inputs + int(vary_w) + 1

    def make(assign: list[str]) -> Placement:
        w = (assign[n_inputs] if vary_w else fast) if has_params else None
        return Placement(tuple(assign[:n_inputs]), w, assign[-1])

    def candidates():
        for t in tiers:
            yield make([t] * slots)
        for k in range(1, slots + 1):
            for idx in itertools.combinations(range(slots), k):
                for choice in itertools.product(slow, repeat=k):
                    assign = [fast] * slots
                    for i, t in zip(idx, choice):
                        assign[i] = t
                    yield make(assign)

    out: list[Placement] = []
    for p in candidates():
        if p not in out:
            out.append(p)
        if len(out) >= max(1, cap):
            break
    if alias is not None:
        out = list(dict.fromkeys(Placement(p.inputs, p.params, p.inputs[alias]) for p in out))
    elif out_tier is not None:
        out = list(dict.fromkeys(Placement(p.inputs, p.params, out_tier) for p in out))
    return out


def storages(tensors) -> set[int]:
    """The addresses of the storages behind ``tensors`` (views share their base's)."""
    return {t.untyped_storage().data_ptr() for t in tensors}


def aliased_input(inputs, outputs) -> int | None:
    """Index of the input whose memory the (first) output shares, if any."""
    first = storages(outputs[:1])
    return next((i for i, t in enumerate(inputs) if t.untyped_storage().data_ptr() in first), None)


# --- the OS and CUDA boundary --------------------------------------------------------------------------------------


def mbind(addr: int, length: int, node: int | None, move: bool = False) -> None:
    """Bind [addr, addr+length) (page-aligned outward) to NUMA node ``node`` (None: back to the default policy);
    ``move`` migrates resident pages."""
    start = addr - addr % PAGE
    length = (addr + length - start + PAGE - 1) // PAGE * PAGE
    mask, maxnode = nodemask(node) if node is not None else (None, 0)
    flags = MPOL_MF_MOVE if move else 0  # pages that cannot move are left; the check after measuring sees them
    if libc().syscall(syscall(0), ctypes.c_void_p(start), ctypes.c_ulong(length),
                      MPOL_BIND if node is not None else MPOL_DEFAULT, mask,
                      ctypes.c_ulong(maxnode + 1 if mask else 0), ctypes.c_uint(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mbind to NUMA node {node} failed: {os.strerror(err)}")


def page_nodes(addr: int, length: int, max_pages: int = _VERIFY_PAGES) -> list[int]:
    """NUMA node of pages of [addr, addr+length) (up to ``max_pages`` evenly spaced); negative: -errno (e.g. -2 =
    not yet faulted in)."""
    first, last = addr // PAGE, (addr + max(length, 1) - 1) // PAGE
    count = last - first + 1
    step = max(1, count // max_pages)
    pages = [(first + i) * PAGE for i in range(0, count, step)][:max_pages]
    arr = (ctypes.c_void_p * len(pages))(*pages)
    status = (ctypes.c_int * len(pages))()
    if libc().syscall(syscall(1), 0, ctypes.c_ulong(len(pages)), arr, None, status, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"move_pages query failed: {os.strerror(err)}")
    return list(status)


@dataclass
class _Cuda:
    """The CUDA runtime through ctypes (the library torch ships with)."""

    lib: ctypes.CDLL = field(default=None)

    def __post_init__(self):
        base = Path(torch.__file__).parent.parent
        found = sorted(glob.glob(str(base / "nvidia" / "**" / "libcudart.so*"), recursive=True))
        for name in found + ["libcudart.so"]:
            with contextlib.suppress(OSError):
                self.lib = ctypes.CDLL(name)
                return
        raise OpcostError("placement", "libcudart not found: GPU host/managed tiers need the CUDA runtime library")

    def malloc_managed(self, nbytes: int) -> int:
        ptr = ctypes.c_void_p()
        rc = self.lib.cudaMallocManaged(ctypes.byref(ptr), ctypes.c_size_t(nbytes), ctypes.c_uint(1))
        if rc != 0:
            raise OpcostError("placement", f"cudaMallocManaged({nbytes}) failed with CUDA error {rc}")
        return ptr.value

    def free(self, ptr: int) -> None:
        self.lib.cudaFree(ctypes.c_void_p(ptr))

    def memory_type(self, ptr: int) -> str:
        class Attr(ctypes.Structure):
            _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int), ("devicePointer", ctypes.c_void_p),
                        ("hostPointer", ctypes.c_void_p), ("reserved", ctypes.c_long * 8)]  # CUDA 13 adds reserved

        a = Attr()
        rc = self.lib.cudaPointerGetAttributes(ctypes.byref(a), ctypes.c_void_p(ptr))
        if rc != 0:
            return f"error {rc}"
        return {0: "unregistered", 1: "host", 2: "device", 3: "managed"}.get(a.type, f"type {a.type}")


class _CudaBuffer:
    """A raw device-accessible pointer offered to torch as a CUDA array (torch keeps this object alive)."""

    def __init__(self, ptr: int, nbytes: int, owner=None, free=None):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}
        self._owner = owner
        if free is not None:
            weakref.finalize(self, free, ptr)


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def _like(raw: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``t``'s values and layout (shape, strides, offset) over the byte buffer ``raw`` (already filled)."""
    out = raw[: t.untyped_storage().nbytes()].view(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())
    return out.detach().requires_grad_(t.requires_grad)


class Placer:
    """Places tensors on tiers and reports where tensors are, for one device and its usable tiers."""

    def __init__(self, tiers: list[Tier], device: str):
        self.tiers = {t.name: t for t in tiers}
        self.device = device
        self._cuda = None
        self._bound: list[tuple[int, int]] = []  # heap ranges bound for outputs, to give back (unbind_outputs)

    @property
    def cuda(self) -> _Cuda:
        if self._cuda is None:
            self._cuda = _Cuda()
        return self._cuda

    def place(self, t: torch.Tensor, tier_name: str) -> torch.Tensor:
        """A copy of ``t`` (same values, dtype, strides, requires_grad) whose memory is on the tier."""
        tier = self.tiers[tier_name]
        nbytes = max(1, t.untyped_storage().nbytes())
        src = _storage_bytes(t.detach())
        with torch.no_grad():
            if tier.kind == "numa":
                size = (nbytes + PAGE - 1) // PAGE * PAGE
                buf = mmap.mmap(-1, size)
                mbind(ctypes.addressof(ctypes.c_char.from_buffer(buf)), size, tier.where)  # before first touch
                raw = torch.frombuffer(buf, dtype=torch.uint8)
                raw[: src.numel()].copy_(src.cpu())
                return _like(raw, t)
            if tier.where == "device":
                raw = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            elif tier.where == "host":
                host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
                raw = torch.as_tensor(_CudaBuffer(host.data_ptr(), nbytes, owner=host), device=self.device)
            else:
                ptr = self.cuda.malloc_managed(nbytes)
                raw = torch.as_tensor(_CudaBuffer(ptr, nbytes, free=self.cuda.free), device=self.device)
            raw[: src.numel()].copy_(src.to(self.device))
            return _like(raw, t)

    def bind_output(self, t: torch.Tensor, tier_name: str) -> None:
        """Move the pages of an output buffer to the tier and bind the range there, so that the allocator's reuse of
        that memory on the next calls keeps outputs on the tier (CPU only; checked by :meth:`where`)."""
        tier = self.tiers[tier_name]
        storage = t.untyped_storage()
        if tier.kind == "numa" and storage.nbytes():
            mbind(storage.data_ptr(), storage.nbytes(), tier.where, move=True)
            self._bound.append((storage.data_ptr(), storage.nbytes()))

    def unbind_outputs(self) -> None:
        """Return the memory bound by :meth:`bind_output` to the default policy (the allocator keeps it and hands it
        to later, unrelated tensors, which must not inherit a tier)."""
        for addr, nbytes in self._bound:
            try:
                mbind(addr, nbytes, None)
            except OSError:  # unmapped since (a large block given back to the OS): nothing to undo
                pass
        self._bound.clear()

    def where_all(self, tensors) -> str:
        """Where a group of tensors is (e.g. a module's parameters): the tiers found, joined by ``+``."""
        found = sorted({self.where(t) for t in tensors} - {"empty"})
        return "+".join(found) if found else "empty"

    def where(self, t: torch.Tensor) -> str:
        """The tier the tensor's memory is on (tier name), ``mixed(...)``, or ``unverified: <why>``."""
        if t.numel() == 0:
            return "empty"
        if t.device.type == "cpu":
            try:
                nodes = set(page_nodes(t.data_ptr(), t.untyped_storage().nbytes() - t.storage_offset()
                                       * t.element_size()))
            except (OSError, KeyError) as e:
                return f"unverified: {e}"
            if any(n < 0 for n in nodes):
                return "unverified: pages not resident"
            names = [name for name, tier in self.tiers.items() if tier.kind == "numa" and tier.where in nodes]
            if len(nodes) == 1:
                return _pick(names, nodes.pop(), "numa")
            return "mixed(" + "/".join(f"node{n}" for n in sorted(nodes)) + ")"
        kind = self.cuda.memory_type(t.data_ptr())
        names = [name for name, tier in self.tiers.items() if tier.kind == "cuda" and tier.where == kind]
        return _pick(names, kind, "cuda")


def _pick(names: list[str], where, kind: str) -> str:
    """The tier name for a verified location; several tiers may share one location (e.g. two names for node 0)."""
    if not names:
        return f"{kind}:{where}"
    return "|".join(names)


def matches(requested: str, verified: str) -> bool:
    return requested in verified.split("|")
