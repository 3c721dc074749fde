"""Streaming backfill at scale: rows/s and peak RSS of the whole ``compat backfill`` command on
``.npy`` and Parquet galleries of growing size, next to the in-memory path and psi alone.

    python benchmarks/bench_backfill_stream.py [--rows 1000000 4000000] [--formats npy parquet]

For each size N (d = ``--dim``, psi of ``--hidden`` width, the pipeline's default):

* ``stream-<fmt>``: ``compat backfill --gallery g.<fmt> --out out.<fmt>`` in a subprocess (file
  in, resumable blocks, file out; the CLI as a user runs it), timed from outside; its peak RSS
  is the child's own ``ru_maxrss`` (``os.wait4``);
* ``in-memory``: in a subprocess, ``numpy.load`` the whole ``.npy``, psi over it with
  :func:`compat.maps.psi.upgrade_array`, ``numpy.save`` the result (what a backfill that
  holds the gallery in memory does); its psi time alone is reported as ``psi``.

Each run is alone in its process, one after the other, so the ratios compare runs of the same
host minutes. Prints rows/s, us/row and peak RSS per run, then streaming / in-memory and
command / psi rate ratios (targets: >= 0.8x and >= 0.5x; peak RSS flat in N, < 1.2 GB at 4M).
Disk: about 3 x N x d x 4 bytes per size and format (input, finished blocks, output).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _make_gallery(root: Path, n: int, d: int, fmts: list[str]) -> None:
    """An L2-normalised random gallery written block by block (never whole in memory)."""
    from compat.embeddings.bundle import Sidecar, save_sidecar
    from compat.embeddings.formats import write_npy_header, write_shard

    rng = np.random.default_rng(0)
    block = 1 << 18
    folder = root / "g"
    if "parquet" in fmts:
        folder.mkdir()
    with open(root / "g.npy", "wb") as f:
        write_npy_header(f, n, d)
        for s in range(0, n, block):
            x = rng.standard_normal((min(block, n - s), d), dtype=np.float32)
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            f.write(x.data)
            if "parquet" in fmts:
                ids = np.char.add("r", np.arange(s, s + len(x)).astype(np.str_))
                write_shard(folder / f"part-{s // block:05d}.parquet", ids, x,
                            np.arange(s, s + len(x)) % 1000, None)  # fmt: skip
    save_sidecar(root / "g.meta.npz", Sidecar(None, None, None, "v1", None, {}))
    if "parquet" in fmts:
        (folder / "_compat.json").write_text(json.dumps({"version": "v1"}))


def _psi(root: Path, d: int, hidden: int) -> Path:
    import torch

    from compat.maps.psi import UpgradeModule, save_upgrade

    torch.manual_seed(0)
    save_upgrade(root / "psi", UpgradeModule(d, d, hidden).eval(), {"from": "v1", "to": "v2"})
    return root / "psi"


def _run(cmd: list[str]) -> dict:
    """Run ``cmd``; wall seconds and the child's own peak RSS (MB)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    out, err = p.stdout.read().decode(), p.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return {"seconds": wall, "peak_rss_mb": usage.ru_maxrss / 1024, "stdout": out}


IN_MEMORY = """
import sys, time, json, numpy as np, torch
from compat.maps.psi import load_upgrade, upgrade_array
src, dst, psi_dir = sys.argv[1:4]
t0 = time.perf_counter()
psi, _ = load_upgrade(psi_dir)
x = np.load(src)
t1 = time.perf_counter()
y = upgrade_array(psi, x)
t2 = time.perf_counter()
np.save(dst, y)
t3 = time.perf_counter()
print(json.dumps({"psi_seconds": t2 - t1, "total_seconds": t3 - t0}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 4_000_000])
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=65536)
    ap.add_argument("--formats", nargs="+", default=["npy", "parquet"], choices=["npy", "parquet"])
    ap.add_argument("--no-in-memory", action="store_true", help="skip the in-memory path")
    ap.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    results: list[dict] = []
    print(f"streaming backfill, d={args.dim}, psi hidden {args.hidden}, blocks of "
          f"{args.batch_size} rows, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    for n in args.rows:
        root = Path(tempfile.mkdtemp(prefix="bench-stream-", dir=args.dir))
        try:
            _make_gallery(root, n, args.dim, args.formats)
            psi = _psi(root, args.dim, args.hidden)
            row: dict = {"rows": n}
            if not args.no_in_memory:
                mem = _run([sys.executable, "-c", IN_MEMORY, str(root / "g.npy"),
                            str(root / "mem.npy"), str(psi)])  # fmt: skip
                inner = json.loads(mem["stdout"].strip().splitlines()[-1])
                row["in-memory"] = {
                    "seconds": inner["total_seconds"],
                    "peak_rss_mb": mem["peak_rss_mb"],
                }
                row["psi"] = {"seconds": inner["psi_seconds"]}
                (root / "mem.npy").unlink()
            for fmt in args.formats:
                src = root / ("g.npy" if fmt == "npy" else "g")
                dst = root / ("out.npy" if fmt == "npy" else "out")
                res = _run([sys.executable, "-m", "compat.cli.main", "backfill",
                            "--gallery", str(src), "--out", str(dst), "--from", "v1", "--to", "v2",
                            "--psi", str(psi), "--batch-size", str(args.batch_size),
                            "--no-progress", "--json"])  # fmt: skip
                row[f"stream-{fmt}"] = {
                    "seconds": res["seconds"],
                    "peak_rss_mb": res["peak_rss_mb"],
                }
                if fmt == "npy":
                    a = np.load(dst, mmap_mode="r")
                    row["stream-npy"]["rows_checked"] = int(a.shape[0])
                shutil.rmtree(dst, ignore_errors=True) if dst.is_dir() else dst.unlink()
            for name, r in row.items():
                if isinstance(r, dict):
                    r["rows_per_s"] = n / r["seconds"]
                    rss = f"  peak RSS {r['peak_rss_mb']:7.0f} MB" if "peak_rss_mb" in r else ""
                    print(f"  {n:>11,} rows  {name:15s} {r['rows_per_s']:>12,.0f} rows/s  "
                          f"{1e6 * r['seconds'] / n:6.2f} us/row{rss}")  # fmt: skip
            for fmt in args.formats if "psi" in row else []:
                s = row[f"stream-{fmt}"]["rows_per_s"]
                row[f"ratio_{fmt}_vs_in_memory"] = s / row["in-memory"]["rows_per_s"]
                row[f"ratio_{fmt}_vs_psi"] = s / row["psi"]["rows_per_s"]
                print(f"  {n:>11,} rows  stream-{fmt} / in-memory {row[f'ratio_{fmt}_vs_in_memory']:.2f}x"
                      f" (target >= 0.8x);  / psi alone {row[f'ratio_{fmt}_vs_psi']:.2f}x (target >= 0.5x)")  # fmt: skip
            results.append(row)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
