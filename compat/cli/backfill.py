"""``compat backfill``: upgrade a stored gallery into a new version's space with its psi.

Registered on the main app by ``backfill.register(app)``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from compat.cli.common import check_bootstrap_options, exit_on_error
from compat.errors import NOTHING_DONE

HELP = (
    "Upgrade the stored embeddings of a gallery made by --from into --to's space with the "
    "upgrade module psi (BiCT), without the images.\n\n"
    "psi is read from --psi, default <models>/<to>/upgrade/ (written by the upgrade stage). "
    "Rows are upgraded in batches with a progress bar; a killed run started again with the "
    "same arguments resumes where it stopped (finished batches are kept in .<out>.backfill/ "
    "beside --out). --out appears only when complete; the input gallery is never modified.\n\n"
    "--fraction F upgrades rows until floor(F x n) of the gallery's n rows are in --to (rows "
    "upgraded earlier count), taking the oldest rows (first in the file) or a seeded random "
    "order. The output records each row's version in row_versions; a mixed gallery is searched "
    "with --to's query embeddings (upgraded rows are in --to's space, the rest in --from's, "
    "which a backward-compatible --to can query): see compat.embeddings.mixed.\n\n"
    "Formats follow the path, for --gallery and --out alike: .npz (a bundle), .npy (the "
    "matrix, read in blocks; labels, ids and versions in a <stem>.meta.npz sidecar) or a folder "
    "of Parquet shards (columns id, embedding as a fixed-size list of float32, optional label "
    "and row_version). Rows stream through in blocks of --batch-size, so memory stays bounded "
    "for .npy and Parquet galleries of any size.\n\n"
    "--engine ray runs psi as Ray tasks, one per block (any format, any --fraction): on a "
    "local Ray runtime, or on the cluster named by RAY_ADDRESS; the output is identical to the "
    "local engine's.\n\n"
    "A LanceDB table (--gallery <folder>/<name>.lance, no --out) is backfilled in place: the "
    "column vec_<to> is added (or filled further) from vec_<from>, fragment by fragment, in one "
    "commit, without rewriting any other column; rows --fraction leaves out stay null in "
    "vec_<to>. A killed run resumes from its finished fragments (.<name>.lance.backfill/ beside "
    "the table); one command at a time writes a table (.<name>.lance.lock). Its rows are read "
    "at most 8,192 at a time, whatever --batch-size. With --engine ray each fragment is one "
    "Ray task that reads, maps and writes it. See docs/lancedb.md.\n\n"
    "A psi the upgrade stage refused (it did not beat the gallery left alone, or, on the "
    "validation split, keeping the old model) upgrades "
    "nothing: --out is not written and the command exits 7, unless --allow-refused accepts "
    "that (exit 0); --json then says written: false and why.\n\n"
    "--out is replaced only when a backfill wrote it (or it is an empty folder); it may not be, "
    "hold or lie inside the input. One backfill at a time writes an --out (a lock file "
    ".<out>.backfill.lock beside it). A failed run removes its work folder; a killed one keeps "
    "it to resume, and a saved batch that fails its sha256 is computed again.\n\n"
    "Exit codes: 0 done (or nothing to do, accepted with --allow-refused); 2 usage (bad "
    "option, --out missing for a file or given for a table, --out is, holds or lies inside "
    "the input, --out holds something a backfill did not write, --out cannot be written: under "
    "a file, under /proc); 3 a file is missing (gallery, table, psi); 4 bad input (rows not "
    "made by --from, psi of other versions or dimensions, NaN or inf rows, unreadable files, a "
    "wrong Parquet schema, a table without ids or with duplicate ids, a vector column of the "
    "wrong width or not named for a version); 5 the disk is full, over quota or read-only (the "
    "path and the bytes needed are named); 6 another backfill is writing --out or the table; 7 "
    "nothing upgraded, --out not written (psi was refused)."
)


def backfill(
    gallery: Path = typer.Option(
        ...,
        "--gallery",
        "-g",
        help="Stored gallery: .npz, .npy, a Parquet folder or a .lance table.",
    ),
    source: str = typer.Option(..., "--from", help="Version that made the gallery's rows."),
    target: str = typer.Option(..., "--to", help="Version to upgrade the rows into."),
    out: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="Upgraded gallery: .npz, .npy or a Parquet folder (a table: none).",
    ),
    fraction: float = typer.Option(
        1.0, "--fraction", min=0.0, max=1.0, help="Share of the gallery in --to afterwards."
    ),
    order: str = typer.Option("oldest", "--order", help="oldest (first rows first) or random."),
    seed: int = typer.Option(0, "--seed", help="Seed of --order random."),
    models: Path = typer.Option(
        Path("models"), "--models", help="Folder of trained versions (psi in <version>/ upgrade/)."
    ),
    psi: Path | None = typer.Option(
        None, "--psi", help="psi folder (default: upgrade/ in --to's folder under --models)."
    ),
    batch_size: int = typer.Option(8192, "--batch-size", min=1, help="Rows per batch."),
    assume_from: bool = typer.Option(
        False, "--assume-from", help="Treat a gallery that records no version as made by --from."
    ),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N."),
    engine: str = typer.Option(
        "local",
        "--engine",
        help="local (this process) or ray (Ray tasks; RAY_ADDRESS or a local runtime).",
    ),
    progress: bool | None = typer.Option(
        None, "--progress/--no-progress", help="Progress bar (default: when stderr is a terminal)."
    ),
    allow_refused: bool = typer.Option(
        False,
        "--allow-refused",
        help="A refused psi (nothing upgraded, --out not written) exits 0 instead of 7.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object."),
) -> None:
    with exit_on_error():
        check_bootstrap_options(seed=seed)  # --order random's seed, before any work
        from compat.backfill.apply import backfill as run
        from compat.backfill.plan import ORDERS
        from compat.embeddings.table import is_table
        from compat.errors import UsageError
        from compat.maps.psi import upgrade_folder

        if order not in ORDERS:
            raise UsageError(f"--order {order!r}: expected one of {', '.join(ORDERS)}")
        common = {
            "source": source, "target": target, "fraction": fraction, "order": order,
            "seed": seed, "batch_size": batch_size, "progress": progress, "device": device,
            "engine": engine, "log": lambda msg: print(msg, file=sys.stderr),
            "psi_dir": psi if psi is not None else upgrade_folder(models, target),
        }  # fmt: skip
        if is_table(gallery):
            from compat.backfill.table import backfill_table

            if out is not None:
                raise UsageError(
                    f"--out {out}: a table is backfilled in place (no --out); export it after "
                    "with compat data export"
                )
            if assume_from:
                raise UsageError("--assume-from: a table's columns name each row's version")
            result = backfill_table(gallery, **common)
            out = gallery
        else:
            if out is None:
                raise UsageError(
                    "--out: missing; a file gallery is backfilled into --out (only a table, "
                    "<folder>/<name>.lance, is backfilled in place)"
                )
            result = run(gallery, out, assume_from=assume_from, **common)
    code = 0 if result.written or allow_refused else NOTHING_DONE
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), sort_keys=True) + "\n")
        raise typer.Exit(code)
    if not result.written:
        hint = "" if allow_refused else " (exit 7; --allow-refused accepts this)"
        print(
            f"backfill: no upgrade: psi {source} -> {target} was refused when it was fitted "
            f"({result.refused}); {result.remaining} rows stay in {source}; {out} not "
            f"written{hint}"
        )
        raise typer.Exit(code)
    unit = "fragments" if is_table(gallery) else "batches"
    resumed = f", resumed after {result.resumed_batches} {unit}" if result.resumed_batches else ""
    wrote = f"wrote {out}"
    if is_table(gallery):
        wrote = (
            f"wrote {result.column} of {out} (table version {result.table_version})"
            if result.table_version is not None
            else f"{out} unchanged"
        )
    print(
        f"backfill: {result.upgraded} of {result.total} rows upgraded {source} -> {target} "
        f"in {result.batches} {unit}{resumed}; {result.already + result.upgraded} rows in "
        f"{target}, {result.remaining} in {source}; {wrote}"
    )


def register(app: typer.Typer) -> None:
    app.command("backfill", help=HELP)(backfill)
