"""compat.cpu: native bf16, the cores a process may use, COMPAT_THREADS, OpenMP's defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compat import cpu as threads
from compat.errors import UsageError


def _cgroup(tmp_path: Path, v2: str | None = None, v1: tuple[str, str] | None = None) -> Path:
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2 + "\n")
    if v1 is not None:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(v1[0] + "\n")
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(v1[1] + "\n")
    return tmp_path


@pytest.mark.parametrize(
    ("v2", "v1", "quota"),
    [
        ("200000 100000", None, 2.0),
        ("150000 100000", None, 1.5),
        ("max 100000", None, None),
        (None, ("50000", "100000"), 0.5),
        (None, ("-1", "100000"), None),
        (None, None, None),
        ("garbage", None, None),
    ],
)
def test_cgroup_quota_reads_v2_then_v1(tmp_path, v2, v1, quota):
    assert threads.cgroup_quota(_cgroup(tmp_path, v2, v1)) == quota


def test_available_cores_is_the_affinity_capped_by_the_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert threads.available_cores(_cgroup(tmp_path)) == 4
    assert threads.available_cores(_cgroup(tmp_path, "150000 100000")) == 2  # rounded up
    (tmp_path / "cpu.max").write_text("10000 100000\n")  # a tenth of a core: still one thread
    assert threads.available_cores(tmp_path) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert threads.available_cores(_cgroup(tmp_path / "none")) == 1


@pytest.mark.parametrize(("raw", "n"), [("3", 3), (" 1 ", 1), ("", None), ("4096", 4096)])
def test_compat_threads_is_read(raw, n):
    assert threads.requested_threads({"COMPAT_THREADS": raw}) == n


@pytest.mark.parametrize("raw", ["x", "0", "-2", "1.5", "4097"])
def test_a_bad_compat_threads_is_a_usage_error_naming_it(raw):
    with pytest.raises(UsageError, match=r"COMPAT_THREADS: .* got") as err:
        threads.requested_threads({"COMPAT_THREADS": raw})
    assert err.value.exit_code == 2


def test_environment_defaults_keep_what_the_user_set(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    env: dict[str, str] = {}
    threads.environment_defaults(env, _cgroup(tmp_path), fast_bf16=True)
    assert env == {}  # unrestricted, native bf16: the libraries' own count and wait policy
    threads.environment_defaults(env, tmp_path, fast_bf16=False)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}  # float32 kernels: idle threads sleep
    env = {"OMP_WAIT_POLICY": "ACTIVE", "COMPAT_THREADS": "1"}
    threads.environment_defaults(env, tmp_path, fast_bf16=False)
    assert env["OMP_WAIT_POLICY"] == "ACTIVE" and env["OMP_NUM_THREADS"] == "1"
    env = {"OMP_NUM_THREADS": "2", "COMPAT_THREADS": "1"}
    threads.environment_defaults(env, tmp_path, fast_bf16=True)
    assert env["OMP_NUM_THREADS"] == "2"  # the user's own OpenMP setting wins
    env = {"COMPAT_THREADS": "lots"}
    threads.environment_defaults(env, tmp_path, fast_bf16=True)  # importing never fails
    assert "OMP_NUM_THREADS" not in env


def test_environment_defaults_follow_a_restriction(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    env: dict[str, str] = {}
    threads.environment_defaults(env, _cgroup(tmp_path, "200000 100000"), fast_bf16=True)
    assert env == {"OMP_NUM_THREADS": "2"}


@pytest.mark.parametrize(
    ("flags", "fast"),
    [("fpu avx512f avx512_bf16 sse", True), ("fpu amx_bf16 amx_tile", True), ("fpu avx2", False)],
)
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path, flags, fast):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor : 0\nflags : {flags}\n")
    assert threads.cpu_has_fast_bf16(info) is fast
    assert threads.cpu_has_fast_bf16(tmp_path / "missing") is False


def test_cpu_threads_takes_compat_threads_then_omp_num_threads(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.delenv("COMPAT_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads.cpu_threads(_cgroup(tmp_path)) == 3
    for omp, n in (("2", 2), ("1,1", 1), ("zero", 3), ("0", 3)):
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
        assert threads.cpu_threads(tmp_path) == n, omp
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("COMPAT_THREADS", "1")
    assert threads.cpu_threads(tmp_path) == 1


def test_apply_threads_sizes_torch(monkeypatch):
    import torch

    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("COMPAT_THREADS", "1")
        assert threads.apply_threads() == 1 and torch.get_num_threads() == 1
        assert threads.apply_threads(2) == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def _one_core() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_a_process_pinned_to_one_core_runs_torch_on_one_thread():
    """The real thing: a process started on one core (as ``taskset -c 0`` does) that imports
    compat before torch gets one OpenMP thread, and the wait policy measured for its CPU."""
    code = (
        "import os, compat, torch; "
        "print(os.environ.get('OMP_WAIT_POLICY', 'unset'), os.environ.get('OMP_NUM_THREADS'), "
        "torch.get_num_threads())"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "COMPAT_THREADS"))}
    r = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=_one_core,
        check=True,
    )
    policy, omp, torch_threads = r.stdout.split()
    assert policy == ("unset" if threads.cpu_has_fast_bf16() else "PASSIVE")
    if (os.cpu_count() or 1) > 1:
        assert omp == "1" and torch_threads == "1"
