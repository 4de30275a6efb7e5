"""NUMA memory policy through libc's ``syscall``, without torch: binding a tensor's pages (``mbind``), locating
pages (``move_pages``) and binding a whole process before torch starts its threads (``set_mempolicy``).

Python's os module exposes none of these and libnuma is not needed: the syscall numbers per architecture are below.
A process bound with :func:`bind_process` allocates every page it touches afterwards on that node, in every
thread it starts afterwards (threads inherit the policy; torch's intra-op pool is started by its first parallel
operator), unless a range has its own policy (``mbind``), which takes precedence.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
from pathlib import Path

MPOL_DEFAULT, MPOL_BIND = 0, 2
MPOL_MF_MOVE = 2
NODE_SYSFS = "/sys/devices/system/node"
# (mbind, move_pages, set_mempolicy) syscall numbers
SYSCALLS = {"x86_64": (237, 279, 238), "aarch64": (235, 239, 237), "ppc64le": (259, 301, 261)}


@functools.lru_cache(maxsize=1)
def libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def nodemask(node: int):
    """(a node mask with only ``node`` set, its width in bits)."""
    words = node // 64 + 1
    mask = (ctypes.c_ulong * words)()
    mask[node // 64] = 1 << (node % 64)
    return mask, words * 64


def syscall(index: int) -> int:
    """The number of syscall ``index`` of :data:`SYSCALLS` on this machine (KeyError on an unknown architecture)."""
    return SYSCALLS[platform.machine()][index]


def nodes(sysfs: str | Path = NODE_SYSFS) -> list[int]:
    """The NUMA nodes this host has (their folders under ``sysfs``), in order."""
    return sorted(int(d.name[4:]) for d in Path(sysfs).glob("node[0-9]*"))


def bind_process(node: int, sysfs: str | Path = NODE_SYSFS) -> str | None:
    """Bind the calling thread's memory policy to NUMA node ``node`` (``MPOL_BIND``), for every page it and the
    threads it starts afterwards touch; None when done, else why it was not (the node or the syscall missing)."""
    if not (Path(sysfs) / f"node{node}").exists():
        return f"NUMA node {node} not present on this host"
    if platform.machine() not in SYSCALLS:
        return f"no set_mempolicy syscall number known for {platform.machine()}"
    mask, maxnode = nodemask(node)
    if libc().syscall(syscall(2), MPOL_BIND, mask, ctypes.c_ulong(maxnode + 1)) != 0:
        err = ctypes.get_errno()
        return f"set_mempolicy to NUMA node {node} failed: {os.strerror(err)}"
    return None


def bind_to_tier(placement: dict, tier: str, sysfs: str | Path = NODE_SYSFS) -> str | None:
    """Bind this process to the NUMA node of tier ``tier`` of config ``placement`` (:func:`bind_process`): None when
    done, else why not (not a NUMA tier, the node or the syscall missing)."""
    spec = (placement.get("tiers") or {}).get(tier) or {}
    if "numa" not in spec:
        return (f"tier {tier} is not a NUMA tier: a model's activations are allocated by the device, so only isolated "
                "operators are placed on it")
    return bind_process(int(spec["numa"]), sysfs)
