"""How many CPU threads compat's numeric work uses, and how those threads wait.

Two facts measured on the project's 2-core machines (docs/findings.md, "Training beside other
work"; ``python benchmarks/bench_threads.py``):

- **Spinning threads collapse under load.** PyTorch's CPU kernels run on GNU OpenMP, whose idle
  threads spin before they sleep. With another CPU-bound process on the machine, a 2-thread
  training spends its time spinning at barriers waiting for the thread that was preempted: it
  ran at 0.09-0.35x its speed alone. With ``OMP_WAIT_POLICY=PASSIVE`` idle threads sleep, and
  the same training ran at about 0.55x, the fair half of the machine, at the same speed alone.
  :mod:`compat` sets that default when it is imported (before torch loads OpenMP); a value the
  user set is kept.
- **A process may use fewer cores than the machine has.** PyTorch, MKL and faiss size their
  thread pools from the machine's cores, not from the process's CPU affinity (``taskset``, a
  container's cpuset) or its CPU quota (a cgroup's ``cpu.max``, Kubernetes' CPU limit); more
  threads than cores then oversubscribe the same way. :func:`cpu_threads` counts the cores this
  process may use, and :func:`environment_defaults` writes it to ``OMP_NUM_THREADS`` where it is
  fewer than the machine's.

The knob is ``COMPAT_THREADS=N`` (environment): every compat process uses N threads for torch,
MKL and faiss; ``train.<version>.threads`` in params.yaml overrides it for one training. Two
trainings sharing a 2-core machine (``dvc queue start -j 2``) each run fastest with
``COMPAT_THREADS=1``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from compat.errors import UsageError

ENV = "COMPAT_THREADS"
_CGROUP = Path("/sys/fs/cgroup")


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


def cpu_threads(root: Path = _CGROUP) -> int:
    """Threads for compat's CPU work: ``COMPAT_THREADS``, else the cores this process may use."""
    return requested_threads() or available_cores(root)


def environment_defaults(
    environ: MutableMapping[str, str] | None = None, root: Path = _CGROUP
) -> None:
    """Set the OpenMP defaults above in ``environ`` (default ``os.environ``), keeping any value
    already there. Must run before torch or faiss loads its OpenMP runtime, which reads them once:
    :mod:`compat`'s ``__init__`` calls it. A bad ``COMPAT_THREADS`` is left for
    :func:`cpu_threads` to report where a command reads it (importing must not fail)."""
    env = os.environ if environ is None else environ
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
    import sys

    import torch

    n = threads or cpu_threads()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    faiss = sys.modules.get("faiss")
    if faiss is not None:
        faiss.omp_set_num_threads(n)
    return n
