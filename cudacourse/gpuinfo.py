"""The CUDA driver, asked directly, without importing torch: what GPU this machine has, and how a process's
contexts wait (:func:`sleep_while_waiting`).

The grader decides its backend and names the device before it starts anything, and its build workers need
the GPU's compute capability for nvcc's ``-gencode``. Through torch that costs an ``import torch`` and a
CUDA initialisation in each of those processes: 4.6 s of one core before the H100 machine's grade started
anything, and 6 s in each of the seven build workers before nvcc ran (2026-11-28). The driver's own API
(``libcuda.so.1``, which every CUDA program loads) answers in a fraction of that.

:func:`torch_sees_gpu` answers what ``torch.cuda.is_available()`` would, without the import: a CUDA build
of torch (its ``version.py``), a driver at least as new as that build's CUDA, and a device. When anything
is unclear it says ``None`` and the caller asks torch.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

# cuDeviceGetAttribute's numbers for the compute capability (cuda.h: CUdevice_attribute)
_CC_MAJOR, _CC_MINOR = 75, 76


@dataclass(frozen=True)
class GpuInfo:
    """Device 0 as the driver sees it (``CUDA_VISIBLE_DEVICES`` applies), and the driver's CUDA version."""

    name: str
    major: int
    minor: int
    driver: int  # as cuDriverGetVersion gives it: 13000 for CUDA 13.0
    count: int


@functools.lru_cache(maxsize=1)
def driver() -> ctypes.CDLL | None:
    """The CUDA driver library, initialised (``cuInit``; no context is made), or None where it cannot be."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return cuda if cuda.cuInit(0) == 0 else None


@functools.lru_cache(maxsize=1)
def probe() -> GpuInfo | None:
    """Device 0 of the CUDA driver, or None (no driver library, no device, or an error from the driver)."""
    cuda = driver()
    if cuda is None:
        return None
    try:
        count, driver_version, dev = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
            return None
        if cuda.cuDriverGetVersion(ctypes.byref(driver_version)) != 0 or cuda.cuDeviceGet(ctypes.byref(dev), 0) != 0:
            return None
        name = ctypes.create_string_buffer(256)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        if (cuda.cuDeviceGetName(name, 256, dev) != 0
                or cuda.cuDeviceGetAttribute(ctypes.byref(major), _CC_MAJOR, dev) != 0
                or cuda.cuDeviceGetAttribute(ctypes.byref(minor), _CC_MINOR, dev) != 0):
            return None
    except AttributeError:  # not the driver API we know
        return None
    return GpuInfo(name.value.decode(errors="replace"), major.value, minor.value, driver_version.value, count.value)


def sleep_while_waiting() -> None:
    """Make this process's CUDA contexts sleep, not spin, while they wait for the GPU. Call it before the first
    context is made (before torch touches the GPU); only in a process whose GPU calls are never timed.

    With CUDA's default scheduling a process with fewer contexts than cores spins a core for as long as it waits
    (a copy back to the host, a synchronize). During a grade a dozen processes share the one GPU, and a spinning
    waiter takes a core that the builds and the other tasks need; a sleeping thread needs microseconds to wake,
    which only a timed call would notice."""
    cu = driver()
    n, dev = ctypes.c_int(), ctypes.c_int()
    if cu is None or cu.cuDeviceGetCount(ctypes.byref(n)) != 0:
        return  # (torch reports a GPU it cannot use when the first tensor moves there)
    set_flags = getattr(cu, "cuDevicePrimaryCtxSetFlags_v2", None) or cu.cuDevicePrimaryCtxSetFlags
    for i in range(n.value):
        if cu.cuDeviceGet(ctypes.byref(dev), i) == 0:
            set_flags(dev, 4)  # CU_CTX_SCHED_BLOCKING_SYNC


def torch_cuda_version() -> str | None:
    """The CUDA version torch was built with (``torch.version.cuda``: '13.0'), read from its ``version.py``
    without importing torch; '' for a CPU build, None when torch is missing or the file is not as expected."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return None
    m = re.search(r"^cuda\b[^=\n]*=\s*(None|'([0-9.]+)'|\"([0-9.]+)\")\s*$", text, re.M)
    if m is None:
        return None
    return m.group(2) or m.group(3) or ""


def torch_sees_gpu() -> bool | None:
    """What ``torch.cuda.is_available()`` would say, without importing torch; None when unsure."""
    version = torch_cuda_version()
    if version is None:
        return None
    if version == "":
        return False  # a CPU build of torch
    gpu = probe()
    if gpu is None:
        return False
    major, _, minor = version.partition(".")
    try:
        needed = int(major) * 1000 + int(minor or 0) * 10
    except ValueError:
        return None
    # An older driver than torch's CUDA: torch may still work through CUDA's minor-version compatibility,
    # or may not; torch itself decides.
    return True if gpu.driver >= needed else None


def arch() -> str | None:
    """The architecture kernel files are built for on this GPU (``9.0a`` on Hopper, whose wgmma and TMA exist
    only in sm_90a code), or None without a usable driver."""
    gpu = probe()
    if gpu is None:
        return None
    return f"{gpu.major}.{gpu.minor}{'a' if gpu.major >= 9 else ''}"
