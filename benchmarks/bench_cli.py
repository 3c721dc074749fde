"""Wall time and peak memory of the registry commands, side by side with ``import mlflow``.

    python benchmarks/bench_cli.py [--items 10000] [--repeat 3] [--project DIR]

Builds a throw-away project (``registry_project.py``: v1 and v2 registered from embeddings
bundles, v1 promoted), or reuses ``--project`` when it already holds one, then runs each
command ``--repeat`` times in a fresh process and prints the median wall seconds and the
largest peak RSS (``os.wait4``'s ``ru_maxrss`` of that process alone), each with its ratio to
``python -c "import mlflow"`` measured in the same run. Targets (issue 29): the read commands
<= 1.5 s and importing no mlflow; ``promote --dry-run`` on cached embeddings <= 3 s and
<= 600 MB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from registry_project import build_project

COMPAT = [sys.executable, "-m", "compat.cli.main"]


TIME = "/usr/bin/time"


def measure(cmd: list[str], cwd: Path) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MB, exit code) of one fresh process.

    The peak is read by ``/usr/bin/time`` where it exists: a child forked from this (large)
    Python process would count this process's pages in its own ``ru_maxrss`` (Linux carries
    the high-water mark across exec), so ``python -c pass`` would read ~70 MB instead of ~10."""
    with tempfile.NamedTemporaryFile("r") as out:
        timed = [TIME, "-f", "%M", "-o", out.name, *cmd] if os.path.exists(TIME) else cmd
        t = time.perf_counter()
        proc = subprocess.Popen(
            timed, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        kib = usage.ru_maxrss  # KiB on Linux
        if timed is not cmd:
            kib = int(out.read().strip().splitlines()[-1])
    return wall, kib / 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--project", type=Path, help="reuse (or build) the project in this folder")
    args = ap.parse_args()
    root = args.project or Path(tempfile.mkdtemp(prefix="bench-cli-"))
    if not (root / "registry" / "mlflow.db").is_file():
        build_project(root, args.items, args.dim)
    cases = [
        ("python -c pass", [sys.executable, "-c", "pass"], None),
        ("import mlflow", [sys.executable, "-c", "import mlflow"], None),
        ("compat --help", [*COMPAT, "--help"], 0.5),
        ("compat versions", [*COMPAT, "versions"], 1.5),
        ("compat show v2", [*COMPAT, "show", "v2"], 1.5),
        ("compat chain v2", [*COMPAT, "chain", "v2"], 1.5),
        ("compat log", [*COMPAT, "log"], 1.5),
        ("compat verify", [*COMPAT, "verify"], 1.5),
        (
            "compat promote --dry-run",
            [
                *COMPAT,
                "promote",
                "v2",
                "--against",
                "v1",
                "--dry-run",
                "--bootstrap",
                str(args.bootstrap),
            ],
            3.0,
        ),
    ]
    results = []
    for name, cmd, target in cases:
        runs = [measure(cmd, root) for _ in range(args.repeat)]
        wall = statistics.median(r[0] for r in runs)
        rss = max(r[1] for r in runs)
        codes = sorted({r[2] for r in runs})
        results.append((name, wall, rss, codes, target))
    base_wall, base_rss = results[1][1], results[1][2]
    print(f"project {root} (median of {args.repeat} fresh processes; {os.cpu_count()} cores)")
    print(
        f"{'command':26s} {'wall s':>7s} {'/mlflow':>8s} {'peak MB':>8s} {'/mlflow':>8s}  exit  target"
    )
    for name, wall, rss, codes, target in results:
        goal = "" if target is None else f"<= {target:g} s" + ("" if wall <= target else " MISSED")
        print(
            f"{name:26s} {wall:7.2f} {wall / base_wall:8.2f} {rss:8.0f} {rss / base_rss:8.2f}  "
            f"{','.join(map(str, codes)):4s}  {goal}"
        )


if __name__ == "__main__":
    main()
