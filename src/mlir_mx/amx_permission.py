"""The operating system's permission to use AMX tiles in this process.

Linux (>= 5.16) enables the AMX tile state (``XTILEDATA``, 8 KiB per
thread) only for a process that asks: ``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``.  Without it the first tile instruction traps and the
process dies (``SIGILL``), so no AMX kernel may run before
:func:`amx_permission` granted it.  The request is process-wide, asking
twice is harmless (torch's oneDNN asks for the same), and the answer is
cached: asked once per process.  The kernel may refuse it, e.g. where a
thread's ``sigaltstack`` is too small for the tile state
(docs.kernel.org/arch/x86/xstate.html).

:func:`amx_permission` never raises: on another system or architecture, a
CPU without AMX, an old kernel or a refusal it returns a false
:class:`AMXPermission` whose ``reason`` says why.  Whether AMX-BF16 is
*usable* (the permission and a start-up self-test of the instruction's
bits) is :func:`mlir_mx.linear.amx.amx_bf16_usable`.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
from dataclasses import dataclass

from mlir_mx.host import host_arch, reported_features

__all__ = [
    "ARCH_GET_XCOMP_PERM",
    "ARCH_REQ_XCOMP_PERM",
    "SYS_ARCH_PRCTL",
    "XFEATURE_XTILEDATA",
    "AMXPermission",
    "amx_permission",
    "permission_problem",
]

#: ``arch_prctl`` codes (Linux ``arch/x86/include/uapi/asm/prctl.h``).
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
#: The tile data state component (``XFEATURE_XTILEDATA``).
XFEATURE_XTILEDATA = 18
#: ``SYS_arch_prctl`` on x86-64 Linux.
SYS_ARCH_PRCTL = 158


@dataclass(frozen=True)
class AMXPermission:
    """The OS's answer: ``granted`` and, either way, ``reason`` in words."""

    granted: bool
    reason: str

    def __bool__(self) -> bool:
        return self.granted


def permission_problem(system: str, arch: str, reported) -> str | None:
    """Why a process on ``system`` / ``arch`` with CPU features ``reported``
    (what the OS reports, unmasked) cannot ask for the tile state; None
    where it can ask."""
    if system != "Linux":
        return f"AMX tile permission is a Linux request (arch_prctl); this is {system}"
    if arch != "x86_64":
        return f"AMX is an x86-64 feature; this CPU is {arch}"
    missing = [f for f in ("amx_tile", "amx_bf16") if f not in reported]
    if missing:
        return f"the CPU does not report {' and '.join(missing)} (/proc/cpuinfo)"
    return None


def _arch_prctl(libc, code: int, arg) -> tuple[int, int]:
    """``syscall(SYS_arch_prctl, code, arg)``: (return value, errno)."""
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(code), arg)
    return rc, ctypes.get_errno()


def _request() -> AMXPermission:
    """Ask Linux for the tile state and read back the permitted set."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
    except (OSError, AttributeError) as err:
        return AMXPermission(False, f"no C library syscall() to ask with: {err}")
    rc, err = _arch_prctl(libc, ARCH_REQ_XCOMP_PERM, ctypes.c_ulong(XFEATURE_XTILEDATA))
    if rc != 0:
        name = errno.errorcode.get(err, str(err))
        why = {
            errno.EINVAL: "the kernel does not know the request (Linux < 5.16) or the feature",
            errno.ENOSYS: "no arch_prctl system call",
            errno.ENOSPC: "a thread's sigaltstack is too small for the tile state",
        }.get(err, os.strerror(err) if err else "refused")
        return AMXPermission(
            False, f"the tile state request (arch_prctl ARCH_REQ_XCOMP_PERM) failed: {name}: {why}"
        )
    mask = ctypes.c_ulong(0)
    rc, err = _arch_prctl(libc, ARCH_GET_XCOMP_PERM, ctypes.byref(mask))
    if rc != 0 or not mask.value >> XFEATURE_XTILEDATA & 1:
        return AMXPermission(
            False,
            "arch_prctl(ARCH_GET_XCOMP_PERM) does not list XTILEDATA after the request "
            f"(rc {rc}, errno {err}, mask {mask.value:#x})",
        )
    return AMXPermission(True, f"granted: XTILEDATA in the permitted set {mask.value:#x}")


@functools.cache
def amx_permission() -> AMXPermission:
    """The OS's permission to use AMX tiles in this process, asked once
    (cached); never raises.  False, with the reason, off Linux x86-64, on a
    CPU that does not report ``amx_tile`` and ``amx_bf16``, on a kernel
    without the request (< 5.16) or when the kernel refuses it."""
    try:
        problem = permission_problem(platform.system(), host_arch(), reported_features())
        if problem:
            return AMXPermission(False, problem)
        return _request()
    except Exception as err:  # noqa: BLE001 - the contract: an answer, never an exception
        return AMXPermission(False, f"the request failed: {type(err).__name__}: {err}")
