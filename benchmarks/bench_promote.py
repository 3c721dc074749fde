"""Wall time of ``compat promote`` when embeddings need no model run (target: <= 5 s).

    python benchmarks/bench_promote.py [--items 10000] [--dim 128] [--bootstrap 1000]

Builds a throw-away project with an evaluation set of ``--items`` items, registers v1 and v2
from embeddings bundles (the cached-embeddings path: no forward pass; ``registry_project.py``),
then times the whole ``compat promote v2 --against v1`` command (a fresh process: imports
included) next to ``compat --help`` and ``compat versions`` in the same run.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from registry_project import build_project, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--per-class", type=int, default=10)
    ap.add_argument("--bootstrap", type=int, default=1000)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-promote-"))
    p = build_project(root, args.items, args.dim, args.per_class)
    t_help, _ = run(["--help"], root)
    t_versions, _ = run(["versions"], root)
    t_promote, code = run(
        ["promote", "v2", "--against", "v1", "--dry-run", "--bootstrap", str(args.bootstrap)], root
    )
    print(
        f"items={p.items} dim={p.dim} queries={p.queries} gallery={p.gallery} "
        f"bootstrap={args.bootstrap}"
    )
    print(f"compat --help      {t_help:6.2f} s   (target <= 0.5 s)")
    print(f"compat versions    {t_versions:6.2f} s")
    print(f"compat promote     {t_promote:6.2f} s   exit {code}   (target <= 5 s)")
    print(f"ratio promote / 5 s target: {t_promote / 5:.2f}")


if __name__ == "__main__":
    main()
