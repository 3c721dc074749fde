"""A LanceDB table gallery backfilled in place, side by side with the ``.npy`` file backfill:
wall time, rows/s and peak RSS of the whole ``compat backfill`` command, and what Lance rewrites.

    python benchmarks/bench_backfill_table.py [--rows 4000000] [--engines local ray]
                                              [--rewrites-rows 200000] [--ray-data]
                                              [--ann-rows 1000000]

For N rows (d = ``--dim``, psi of ``--hidden`` width, blocks of ``--batch-size`` rows), in one
run, each command alone in its process, one after the other:

* ``import``: ``compat data import --gallery g.npy --out db/g.lance`` (the table is made once);
* ``npy``: ``compat backfill --gallery g.npy --out out.npy`` (the file backfill, as
  benchmarks/bench_backfill_stream.py runs it);
* ``table-<engine>``: ``compat backfill --gallery db/g.lance`` in place (``vec_v2`` added), on a
  fresh copy of the table for each engine.

Peak RSS is the child's own ``VmHWM`` (sampled; see :func:`_run`); for ``ray`` the driver's,
and the peak of the driver plus every process under it (raylet, workers) sampled every 0.1 s. The rows
of ``vec_v2`` are compared with ``out.npy`` on a sample (bit for bit), and the files of the
other columns before and after (names and sizes).

``--rewrites-rows``: on a smaller table (with a payload column), the bytes each way of adding a
column writes and which columns' files it rewrites: ``merge_insert`` by id (a quarter of the
rows), ``add_columns`` with a function, compat's fill (a quarter, then the rest); with
``--ray-data``, also Ray Data's ``read_lance`` + ``write_lance`` (which can only create, append
or overwrite whole rows).

``--ann-rows``: an ANN index on a table's served column, Lance's IVF-PQ (``create_index`` on
the column, searched through Lance's ``nearest``) against the project's faiss IVF-PQ
(:mod:`compat.embeddings.ann`), same cells, sub-vectors, bits, probes and exact re-ranking, on
the identity-clustered gallery of benchmarks/bench_ann.py: build seconds, queries/s (faiss both
batched and one query at a time, as a served request is; Lance one at a time, as it searches)
and recall@10 against exact search.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_backfill_stream import _make_gallery, _psi  # noqa: E402

os.environ.setdefault("LANCE_LOG", "error")


def _hwm_mb(pid: int) -> float:
    """The peak resident memory (``VmHWM``) of process ``pid`` so far, in MB (0: gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _run(cmd: list[str], tree: bool = False) -> dict:
    """Run ``cmd``: wall seconds, the child's own peak RSS (MB) and, with ``tree``, the peak of
    the child plus every process under it (raylet, workers), both sampled every 0.1 s.

    The child's peak is its ``VmHWM`` (monotonic; the last sample before it exits). Not
    ``ru_maxrss`` from ``wait4``: Linux carries the forking parent's peak across ``exec`` into
    the child's, so every command would report this benchmark's own peak (2,013 MB for all four
    in a first run, with the 1M-row ANN data loaded)."""
    import psutil

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    own, peak = [0.0], [0.0]
    stop = threading.Event()

    def sample() -> None:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(p.pid)
            while not stop.is_set():
                own[0] = max(own[0], _hwm_mb(p.pid))
                if tree:
                    total = 0
                    for q in [proc, *proc.children(recursive=True)]:
                        with contextlib.suppress(psutil.Error):
                            total += q.memory_info().rss
                    peak[0] = max(peak[0], total / 2**20)
                time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err.decode()[-3000:]}")
    return {"seconds": wall, "stdout": out.decode(), "peak_rss_mb": own[0],
            "tree_peak_rss_mb": peak[0] or None}  # fmt: skip


def _data_files(table: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in (table / "data").iterdir()}


def _check_rows(table: Path, npy: Path, n: int, sample: int = 20000) -> bool:
    """``vec_v2`` of sampled rows equals the file backfill's rows, bit for bit."""
    import lance

    rows = np.sort(np.random.default_rng(1).choice(n, size=min(n, sample), replace=False))
    got = lance.dataset(table).take(rows, columns=["vec_v2"]).column("vec_v2").combine_chunks()
    d = got.type.list_size
    x = got.values.to_numpy().reshape(-1, d)
    want = np.load(npy, mmap_mode="r")[rows]
    return bool(np.array_equal(x, want))


def bench_scale(args: argparse.Namespace) -> dict:
    n = args.rows
    root = Path(tempfile.mkdtemp(prefix="bench-table-", dir=args.dir))
    out: dict = {"rows": n, "dim": args.dim}
    try:
        _make_gallery(root, n, args.dim, ["npy"])
        psi = _psi(root, args.dim, args.hidden)
        cli = [sys.executable, "-m", "compat.cli.main"]
        table = root / "db" / "g.lance"
        imp = _run([*cli, "data", "import", "--gallery", str(root / "g.npy"), "--out",
                        str(table), "--version", "v1"])  # fmt: skip
        out["import"] = {k: imp[k] for k in ("seconds", "peak_rss_mb")}
        before = _data_files(table)
        npy = _run([*cli, "backfill", "--gallery", str(root / "g.npy"), "--out",
                        str(root / "out.npy"), "--from", "v1", "--to", "v2", "--psi", str(psi),
                        "--batch-size", str(args.batch_size), "--no-progress", "--json"])  # fmt: skip
        out["npy"] = {k: npy[k] for k in ("seconds", "peak_rss_mb")}
        for engine in args.engines:
            copy = root / "db" / f"{engine}.lance"
            shutil.copytree(table, copy)
            res = _run([*cli, "backfill", "--gallery", str(copy), "--from", "v1", "--to",
                            "v2", "--psi", str(psi), "--batch-size", str(args.batch_size),
                            "--engine", engine, "--no-progress", "--json"],
                           tree=engine == "ray")  # fmt: skip
            after = _data_files(copy)
            new = {k: v for k, v in after.items() if k not in before}
            out[f"table-{engine}"] = {
                "seconds": res["seconds"],
                "peak_rss_mb": res.get("peak_rss_mb"),
                "tree_peak_rss_mb": res.get("tree_peak_rss_mb"),
                "bits_equal_npy": _check_rows(copy, root / "out.npy", n),
                "other_files_untouched": all(after.get(k) == v for k, v in before.items()),
                "new_files": len(new),
                "new_bytes": sum(new.values()),
                "result": json.loads(res["stdout"]),
            }
            shutil.rmtree(copy)
        for name, r in out.items():
            if isinstance(r, dict) and "seconds" in r:
                r["rows_per_s"] = n / r["seconds"]
                rss = r.get("peak_rss_mb") or r.get("tree_peak_rss_mb") or 0
                tree = (
                    f"  (with workers {r['tree_peak_rss_mb']:,.0f} MB)"
                    if r.get("tree_peak_rss_mb")
                    else ""
                )
                print(f"  {n:>11,} rows  {name:12s} {r['seconds']:8.1f} s {r['rows_per_s']:>11,.0f} rows/s"
                      f"  peak RSS {rss:7,.0f} MB{tree}")  # fmt: skip
        for engine in args.engines:
            t = out[f"table-{engine}"]
            print(f"  table-{engine} / npy: {t['rows_per_s'] / out['npy']['rows_per_s']:.2f}x rate; "
                  f"vec_v2 bits equal to out.npy (sample): {t['bits_equal_npy']}; other columns' "
                  f"files untouched: {t['other_files_untouched']}; wrote {t['new_files']} files, "
                  f"{t['new_bytes'] / 2**20:,.0f} MiB")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def bench_rewrites(n: int, d: int, ray_data: bool, workdir: str | None) -> dict:
    """Bytes written and columns rewritten by each way of adding ``vec_v2`` to a table."""
    import lance
    import pyarrow as pa

    root = Path(tempfile.mkdtemp(prefix="bench-rewrites-", dir=workdir))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d), dtype=np.float32)
    fsl = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), d)
    base = pa.table({"id": [f"r{i}" for i in range(n)], "label": np.arange(n) % 1000,
                     "payload": [f"item {i} payload" for i in range(n)], "vec_v1": fsl})  # fmt: skip
    quarter = np.arange(n // 4)
    results: dict = {}

    def fresh(name: str) -> Path:
        path = root / f"{name}.lance"
        lance.write_dataset(base, path, max_rows_per_file=1 << 18)
        return path

    def measure(name: str, path: Path, act) -> None:
        ds = lance.dataset(path)
        old = {f.path: (set(f.fields), (path / "data" / f.path).stat().st_size)
               for fr in ds.get_fragments() for f in fr.metadata.files}  # fmt: skip
        t0 = time.perf_counter()
        act(path)
        secs = time.perf_counter() - t0
        ds = lance.dataset(path)
        fields = {f.name(): f.id() for f in ds.lance_schema.fields()}
        now = {f.path: set(f.fields) for fr in ds.get_fragments() for f in fr.metadata.files}
        new = {p: fl for p, fl in now.items() if p not in old}
        written = sum((path / "data" / p).stat().st_size for p in new)
        rewritten = sorted({name for name, fid in fields.items()
                            for fl in new.values() if fid in fl})  # fmt: skip
        order_kept = ds.to_table(columns=["id"]).column("id").equals(base.column("id"))
        results[name] = {"seconds": secs, "bytes_written": written, "columns_in_new_files":
                         rewritten, "row_order_kept": bool(order_kept)}  # fmt: skip
        print(f"  {name:34s} {secs:7.2f} s  wrote {written / 2**20:8.1f} MiB; columns in the "
              f"new files: {', '.join(rewritten) or '-'}; row order kept: {order_kept}")  # fmt: skip

    def merge_insert(path: Path) -> None:
        sub = pa.table({"id": base.column("id").take(quarter),
                        "vec_v2": fsl.take(pa.array(quarter))})  # fmt: skip
        lance.dataset(path).add_columns(pa.field("vec_v2", fsl.type, nullable=True))
        lance.dataset(path).merge_insert("id").when_matched_update_all().execute(sub)

    def add_columns(path: Path) -> None:
        def udf(batch: pa.RecordBatch) -> pa.RecordBatch:
            return pa.record_batch([batch.column("vec_v1")], names=["vec_v2"])

        lance.dataset(path).add_columns(udf, read_columns=["vec_v1"])

    def compat_fill(fraction: float):
        def act(path: Path) -> None:
            from compat.embeddings.table import open_table
            from compat.embeddings.table_columns import VectorColumn
            from compat.embeddings.table_fill import (
                commit_column,
                declare_column,
                write_fragment_column,
            )

            t = declare_column(open_table(path), VectorColumn("vec_v2", "v2", d))
            chosen = np.arange(n) < int(fraction * n)
            has = any(t.ds.lance_schema.field("vec_v2").id() in f.fields
                      for fr in t.ds.get_fragments() for f in fr.metadata.files)  # fmt: skip
            read = ["vec_v1", "vec_v2"] if has else ["vec_v1"]

            def compute(batch, start):
                from compat.embeddings.table_columns import vectors_of

                v, _ = vectors_of(batch.column("vec_v1"), d, "vec_v1", start)
                ok = chosen[start : start + len(v)]
                return v, ok

            files = [write_fragment_column(t, fr, t.vectors["vec_v2"], read, compute,
                                           batch_size=65536, name=f"fill-{fraction}-{fr.id}.lance")
                     for fr in t.fragments() if chosen[fr.start : fr.start + fr.rows].any()]  # fmt: skip
            commit_column(t, "vec_v2", files)

        return act

    print(f"what adding vec_v2 rewrites ({n:,} rows x {d}, a string payload column):")
    measure("merge_insert by id (a quarter)", fresh("merge"), merge_insert)
    measure("add_columns(function) (all rows)", fresh("add"), add_columns)
    path = fresh("fill")
    measure("compat fill, a quarter", path, compat_fill(0.25))
    measure("compat fill, the rest", path, compat_fill(1.0))
    if ray_data:
        import ray

        def ray_data_write(path: Path) -> None:
            ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR",
                     log_to_driver=False)  # fmt: skip
            ds = ray.data.read_lance(str(path))
            ds = ds.map_batches(lambda b: b.append_column("vec_v2", b.column("vec_v1")),
                                batch_format="pyarrow")  # fmt: skip
            ds.write_lance(str(path), mode="overwrite")
            ray.shutdown()

        measure("ray.data read_lance + write_lance", fresh("raydata"), ray_data_write)
    shutil.rmtree(root, ignore_errors=True)
    return results


def bench_ann(args: argparse.Namespace) -> dict:
    """Lance IVF-PQ on a table's column against faiss IVF-PQ: build, queries/s, recall@10."""
    import lance
    import pyarrow as pa
    from bench_ann import make_data

    from compat.embeddings.ann import build_index, index_search, parse_index, recall_at_k
    from compat.embeddings.search import search

    n, d, k, nq = args.ann_rows, args.dim, 10, args.ann_queries
    nlist, m, nprobe, refine = 1024, d // 4, 8, 10
    g, q = make_data(n, nq, d, n // 100, 0.03)
    _, exact = search(q, g, k, device="cpu")
    out: dict = {"rows": n, "queries": nq, "nlist": nlist, "m": m, "nbits": 8, "nprobe": nprobe,
                 "refine": refine}  # fmt: skip
    print(f"ANN on the served column: {n:,} x {d} ({n // 100:,} identities), {nq:,} queries, "
          f"IVF{nlist},PQ{m}x8, nprobe {nprobe}, top-{k * refine} re-ranked exactly")  # fmt: skip

    spec = parse_index("ivfpq", [f"nlist={nlist}", f"nprobe={nprobe}", f"m={m}", "nbits=8",
                                 f"refine={refine}"])  # fmt: skip
    t0 = time.perf_counter()
    index = build_index(g, spec)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, batched = index_search(index, q, k)
    qps_batch = nq / (time.perf_counter() - t0)
    one = np.empty_like(batched)
    t0 = time.perf_counter()
    for i in range(nq):
        one[i] = index_search(index, q[i : i + 1], k)[1][0]
    qps_one = nq / (time.perf_counter() - t0)
    out["faiss"] = {"build_s": build, "qps_batched": qps_batch, "qps_one_at_a_time": qps_one,
                    "recall@10": recall_at_k(batched, exact)}  # fmt: skip
    del index

    root = Path(tempfile.mkdtemp(prefix="bench-ann-", dir=args.dir))
    try:
        fsl = pa.FixedSizeListArray.from_arrays(pa.array(g.ravel()), d)
        path = root / "g.lance"
        lance.write_dataset(pa.table({"row": np.arange(n), "vec_v2": fsl}), path,
                            max_rows_per_file=1 << 18)  # fmt: skip
        t0 = time.perf_counter()
        ds = lance.dataset(path).create_index("vec_v2", index_type="IVF_PQ", metric="dot",
                                              num_partitions=nlist, num_sub_vectors=m,
                                              num_bits=8)  # fmt: skip
        build = time.perf_counter() - t0
        got = np.empty((nq, k), dtype=np.int64)
        t0 = time.perf_counter()
        for i in range(nq):
            hit = ds.to_table(columns=["row"], nearest={"column": "vec_v2", "q": q[i], "k": k,
                              "nprobes": nprobe, "refine_factor": refine})  # fmt: skip
            rows = hit.column("row").to_numpy()
            got[i, : len(rows)], got[i, len(rows) :] = rows, -1
        qps = nq / (time.perf_counter() - t0)
        out["lance"] = {"build_s": build, "qps_one_at_a_time": qps,
                        "recall@10": recall_at_k(got, exact)}  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
    f, la = out["faiss"], out["lance"]
    print(
        f"  faiss IVF-PQ   build {f['build_s']:7.1f} s  {f['qps_batched']:>9,.0f} q/s batched  "
        f"{f['qps_one_at_a_time']:>7,.0f} q/s one at a time  recall@10 {f['recall@10']:.4f}"
    )
    print(
        f"  Lance IVF_PQ   build {la['build_s']:7.1f} s  {'':>9} {'':17} "
        f"{la['qps_one_at_a_time']:>7,.0f} q/s one at a time  recall@10 {la['recall@10']:.4f}"
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=65536)
    ap.add_argument("--engines", nargs="+", default=["local"], choices=["local", "ray"])
    ap.add_argument("--rewrites-rows", type=int, default=200_000, help="0: skip")
    ap.add_argument("--ray-data", action="store_true", help="also Ray Data's write_lance")
    ap.add_argument("--ann-rows", type=int, default=1_000_000, help="0: skip")
    ap.add_argument("--ann-queries", type=int, default=2000)
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--dir", type=str, default=None, help="scratch folder (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    print(f"table backfill, d={args.dim}, psi hidden {args.hidden}, blocks of {args.batch_size} "
          f"rows, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    results: dict = {}
    if args.rewrites_rows:
        results["rewrites"] = bench_rewrites(args.rewrites_rows, args.dim, args.ray_data, args.dir)
    if args.ann_rows:
        results["ann"] = bench_ann(args)
    if not args.skip_scale:
        results["scale"] = bench_scale(args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
