"""Where a ``dvc repro`` spends its time: run it and print the wall time of every stage at the end.

DVC prints ``Running stage 'NAME':`` when it starts a stage (and ``Stage 'NAME' didn't change,
skipping`` for a cached one); this script runs ``dvc repro`` with the arguments it is given,
passes its output through unchanged, stamps each of those lines, and ends with a table: the
seconds from one stage's start to the next one's (the last stage's until ``dvc repro`` exits), the
peak resident memory of the whole run (children included), and the total. The README's first
command is the budget this watches (10 minutes on the slower machines of the project's kind), so
a stage that regresses shows up in the table instead of only in the sum.

Usage (from a project root, after ``pip install -e .``)::

    python benchmarks/pipeline_times.py              # dvc repro
    python benchmarks/pipeline_times.py --force      # every stage again
    python benchmarks/pipeline_times.py --json t.json -- --force train-v1

Arguments not known to this script (or everything after ``--``) go to ``dvc repro``.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import time

RUNNING = re.compile(r"^Running stage '([^']+)'")
SKIPPED = re.compile(r"^Stage '([^']+)' didn't change, skipping")


def stage_times(events: list[tuple[float, str, str]], end: float) -> list[dict]:
    """``events``: (time, stage, "ran" | "skipped") in the order DVC printed them; a stage ran
    from its line to the next event's (the last one until ``end``). Skipped stages take 0 s."""
    rows = []
    for i, (t, stage, what) in enumerate(events):
        nxt = events[i + 1][0] if i + 1 < len(events) else end
        rows.append({"stage": stage, "status": what, "seconds": nxt - t if what == "ran" else 0.0})
    return rows


def table(rows: list[dict], total: float, peak_mb: float) -> str:
    width = max([len("stage"), *(len(r["stage"]) for r in rows)])
    lines = [f"{'stage':<{width}}  {'seconds':>8}  {'share':>6}"]
    for r in rows:
        if r["status"] == "skipped":
            lines.append(f"{r['stage']:<{width}}  {'cached':>8}  {'':>6}")
        else:
            share = r["seconds"] / total if total > 0 else 0.0
            lines.append(f"{r['stage']:<{width}}  {r['seconds']:>8.1f}  {share:>6.1%}")
    lines.append(f"{'total':<{width}}  {total:>8.1f}  (peak RSS of one process: {peak_mb:,.0f} MB)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the table as JSON to this file")
    args, rest = parser.parse_known_args(argv)
    rest = [a for a in rest if a != "--"]
    start = time.perf_counter()
    events: list[tuple[float, str, str]] = []
    proc = subprocess.Popen(
        ["dvc", "repro", *rest], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if m := RUNNING.match(line):
            events.append((time.perf_counter(), m.group(1), "ran"))
        elif m := SKIPPED.match(line):
            events.append((time.perf_counter(), m.group(1), "skipped"))
    rc = proc.wait()
    end = time.perf_counter()
    # ru_maxrss of the children: the largest single process (Linux reports kB).
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    rows = stage_times(events, end)
    total = end - start
    print()
    print(table(rows, total, peak_mb))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"stages": rows, "total": total, "peak_mb": peak_mb, "rc": rc}, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
