"""What compat knows about the CPU it runs on: whether it computes bf16 natively, the cores a
process may use, how many threads compat's numeric work runs, and how idle threads wait.

Facts measured on the project's 2-core machines (docs/findings.md, "Training beside other
work"; ``python benchmarks/bench_threads.py`` repeats them side by side):

- **A process may use fewer cores than the machine has.** PyTorch, MKL and faiss size their
  thread pools from the machine, not from the process's CPU affinity (``taskset``, a
  container's cpuset) or its CPU quota (a cgroup's ``cpu.max``, Kubernetes' CPU limit); more
  threads than cores oversubscribe them, and a training ran ten times slower that way.
  :func:`cpu_threads` counts the cores this process may use, and :func:`environment_defaults`
  writes that to ``OMP_NUM_THREADS`` where it is fewer than the machine's.
- **Two jobs sharing the cores each run fastest on fewer threads.** On 2 cores with native
  bf16, a 2-thread training beside a busy process ran at 0.25x its speed alone and beside a
  second training at 0.20x; with one thread (``COMPAT_THREADS=1``) at 0.52x in both cases
  (0.51x alone). A process cannot know what will start beside it, and a thread count chosen
  from the load would make the trained weights depend on it (the last bits of a training
  follow the thread count), so the count is a knob: ``COMPAT_THREADS=N`` for every compat
  process (``dvc queue start -j 2`` on 2 cores: ``COMPAT_THREADS=1``), or
  ``train.<version>.threads`` for one training; an ``OMP_NUM_THREADS`` the user set is kept.
- **How idle threads wait depends on the kernels.** GNU OpenMP's idle threads spin before they
  sleep. Where the CPU trains in float32, spinning threads of two processes collapsed a
  training to 0.08x; with ``OMP_WAIT_POLICY=PASSIVE`` (sleep at once) it kept about 0.5x at
  the same speed alone. Where the CPU has native bf16 (AVX512-BF16/AMX, where compat trains in
  bf16), the opposite held: sleeping threads made it 0.7x alone and 0.02x beside a second
  training. So compat sets ``PASSIVE`` on CPUs without native bf16 only.

Both defaults are written by :func:`environment_defaults`, which :mod:`compat`'s ``__init__``
runs before torch or faiss can load OpenMP (which reads them once); a value the user set is
kept.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from compat.errors import UsageError

ENV = "COMPAT_THREADS"
_CGROUP = Path("/sys/fs/cgroup")
_CPUINFO = Path("/proc/cpuinfo")


@functools.cache
def cpu_has_fast_bf16(cpuinfo: Path = _CPUINFO) -> bool:
    """True when the CPU computes bf16 natively (AVX512-BF16 or AMX), where oneDNN's bf16
    convolutions run about twice as fast as float32; elsewhere CPU bf16 is emulated and slower."""
    try:
        flags = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cgroup_quota(root: Path = _CGROUP) -> float | None:
    """The CPU quota of this process's cgroup in cores (``cpu.max`` of cgroup v2, or v1's
    ``cpu.cfs_quota_us / cpu.cfs_period_us``); None where there is none or it cannot be read."""
    try:
        quota, period = (root / "cpu.max").read_text(encoding="ascii").split()[:2]
        if quota != "max":
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text(encoding="ascii"))
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def available_cores(root: Path = _CGROUP) -> int:
    """The cores this process may use: its CPU affinity, capped by its cgroup's CPU quota
    (rounded up: a quota of 1.5 cores still runs two threads' worth of work), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = cgroup_quota(root)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def requested_threads(environ: Mapping[str, str] | None = None) -> int | None:
    """``COMPAT_THREADS`` (of ``environ``, default ``os.environ``) as a positive integer, None
    when unset; a usage error (exit 2) when it is anything else."""
    raw = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 1 <= n <= 4096:
        raise UsageError(f"{ENV}: must be a whole number of threads from 1 to 4096, got {raw!r}")
    return n


def _omp_threads(environ: Mapping[str, str]) -> int | None:
    """The first level of ``OMP_NUM_THREADS`` (``"4"``, ``"4,2"``), None when unset or not a
    positive number (OpenMP ignores such a value too)."""
    first = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else None


def cpu_threads(root: Path = _CGROUP) -> int:
    """Threads for compat's CPU work: ``COMPAT_THREADS``, else ``OMP_NUM_THREADS`` where the
    user (or :func:`environment_defaults`) set it, else the cores this process may use."""
    return requested_threads() or _omp_threads(os.environ) or available_cores(root)


def environment_defaults(
    environ: MutableMapping[str, str] | None = None,
    root: Path = _CGROUP,
    fast_bf16: bool | None = None,
) -> None:
    """Set the OpenMP defaults above in ``environ`` (default ``os.environ``), keeping any value
    already there: ``OMP_NUM_THREADS`` from ``COMPAT_THREADS``, or from the cores this process
    may use where they are fewer than the machine's; ``OMP_WAIT_POLICY=PASSIVE`` on a CPU
    without native bf16 (``fast_bf16``, default :func:`cpu_has_fast_bf16`). Must run before
    torch or faiss loads its OpenMP runtime. A bad ``COMPAT_THREADS`` is left for
    :func:`cpu_threads` to report where a command reads it (importing must not fail)."""
    env = os.environ if environ is None else environ
    if not (cpu_has_fast_bf16() if fast_bf16 is None else fast_bf16):
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        wanted = requested_threads(env)
    except UsageError:
        wanted = None
    if wanted is None:
        cores = available_cores(root)
        if cores >= (os.cpu_count() or cores):
            return  # nothing restricts this process: the libraries' own default
        wanted = cores
    env.setdefault("OMP_NUM_THREADS", str(wanted))


def apply_threads(threads: int | None = None) -> int:
    """Size torch's (and faiss's, where loaded) CPU thread pools: ``threads``, else
    :func:`cpu_threads`. Returns the count used. Imports torch."""
    import torch

    n = threads or cpu_threads()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    faiss = sys.modules.get("faiss")
    if faiss is not None:
        faiss.omp_set_num_threads(n)
    return n
