"""``compat data``: look at the image source the data stage produced; move galleries into and
out of LanceDB tables (``import``, ``export``, ``show``)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from compat.cli.common import App, exit_on_error

data_app = App(
    help="Inspect the image source (data/source.json); import a gallery file into a LanceDB "
    "table, export one, show what a table holds.\n\n"
    "Exit codes: 0 success; 2 usage (bad option; an --out that cannot be written or holds "
    "something compat did not write); 3 the source file (or an image, a gallery) not "
    "found; 4 a malformed source file, an unreadable image or gallery; 5 (preview, import, "
    "export) a full disk, spent quota or read-only file system; 6 another command is writing "
    "the table.",
    no_args_is_help=True,
)

TABLE_HELP = (
    "A table is a folder <database folder>/<name>.lance that LanceDB opens as "
    "lancedb.connect('<database folder>').open_table('<name>'): one row per item (id, label, "
    "your payload columns as they are) and one column vec_<version> per version (see "
    "docs/lancedb.md)."
)


@data_app.command("info")
def info(
    source: Path = typer.Option(Path("data/source.json"), help="the data stage's source file"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Print the source's kind, size, class count and fingerprint.

    Exit codes: 0 success; 2 usage (bad option); 3 the source file not found (run the data
    stage: dvc repro data); 4 a malformed source file."""
    from compat.data.sources import open_source

    with exit_on_error():
        desc = open_source(source).describe()
    if as_json:
        typer.echo(json.dumps(desc, sort_keys=True))
        return
    from compat.cli import output

    rows = [[key, output.human(value)] for key, value in desc.items()]
    output.print_table(("field", "value"), rows, title=str(source), show_header=False)


PREVIEW_MARK = ("Software", "compat data preview")  # the PNG text chunk a preview carries


def _preview_owner(path: Path) -> str | None:
    """None when ``path`` is a PNG ``compat data preview`` wrote (its text chunk says so)."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            made_by = getattr(img, "text", {}).get(PREVIEW_MARK[0])
    except (OSError, ValueError, SyntaxError):
        made_by = None
    return None if made_by == PREVIEW_MARK[1] else "not a PNG compat data preview wrote"


@data_app.command("preview")
def preview(
    out: Path = typer.Option(Path("preview.png"), help="PNG file to write"),
    source: Path = typer.Option(Path("data/source.json"), help="the data stage's source file"),
    classes: int = typer.Option(8, min=1, help="rows: one class each"),
    per_class: int = typer.Option(10, min=1, help="columns: images of the class"),
    scale: int = typer.Option(2, min=1, max=8, help="pixel magnification"),
) -> None:
    """Write a grid of images (one class per row) to see what the models train on.

    --out is replaced only when it is a preview compat wrote (its PNG text chunk says so).

    Exit codes: 0 the PNG written; 2 usage (bad option; an --out that cannot be written, or a
    file there no preview wrote); 3 the source file or an image not found; 4 a malformed
    source file or an unreadable image; 5 a full disk, spent quota or read-only file system
    writing --out (the path and the bytes needed named)."""
    import io

    import numpy as np
    from PIL import Image, PngImagePlugin

    from compat.data.sources import open_source
    from compat.io import write_bytes

    with exit_on_error():
        from compat.outputs import claim

        claim(out, "file", _preview_owner, "--out", "a preview")  # before any work
        src = open_source(source)
        by_class: dict[str, list[str]] = {}
        for item in src.items:
            by_class.setdefault(item.label, []).append(item.id)
        rows = []
        for ids in list(by_class.values())[:classes]:
            imgs = src.load(ids[:per_class])
            pad = np.zeros((per_class - len(imgs), *imgs.shape[1:]), np.uint8)
            rows.append(np.concatenate(list(np.concatenate([imgs, pad])), axis=1))
        grid = np.concatenate(rows, axis=0)
        grid = grid[:, :, 0] if grid.shape[2] == 1 else grid
        img = Image.fromarray(grid).resize(
            (grid.shape[1] * scale, grid.shape[0] * scale), Image.Resampling.NEAREST
        )
        png = io.BytesIO()
        mark = PngImagePlugin.PngInfo()
        mark.add_text(PREVIEW_MARK[0], PREVIEW_MARK[1])  # what _preview_owner recognises
        img.save(png, format="PNG", pnginfo=mark)
        write_bytes(out, png.getvalue())  # a full disk: one line naming out and the bytes
    typer.echo(f"wrote {out}")


@data_app.command("import", help=(
    "Import a gallery file (.npz, .npy with its .meta.npz sidecar, a Parquet folder) into a "
    "LanceDB table.\n\n" + TABLE_HELP + "\n\n"
    "A new table gets id (the file's ids, else row numbers), label (when the file has labels) "
    "and one vec_<version> column per version: a partially backfilled file (row_versions) puts "
    "each row into its version's column, null in the others. A file that records no version "
    "needs --version. Into an existing table the rows are matched by id and fill their "
    "version's column (no row is added). A new table appears whole or not at all.\n\n"
    "Exit codes: 0 imported; 2 usage; 3 the gallery is missing; 4 bad input (unreadable or "
    "NaN rows, no version, duplicate ids, ids not in the table, a column of another width); 5 "
    "the disk is full or read-only; 6 another command is writing the table."
))  # fmt: skip
def import_(
    gallery: Path = typer.Option(
        ..., "--gallery", "-g", help="Gallery file: .npz, .npy or a Parquet folder."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="The table: a .lance folder."),
    version: str | None = typer.Option(
        None, "--version", help="The version that made the rows, when the file records none."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print what the table holds as JSON."),
) -> None:
    with exit_on_error():
        from compat.embeddings.table import check_version, is_table
        from compat.embeddings.table_write import import_gallery
        from compat.errors import UsageError

        if not is_table(out):
            raise UsageError(f"--out {out}: a table path ends in .lance (<folder>/<name>.lance)")
        if is_table(gallery):
            raise UsageError(f"--gallery {gallery}: a table already; import reads a file gallery")
        if version is not None:
            check_version(version, "--version")
        table = import_gallery(gallery, out, version=version)
    _say_table(table, f"import: {gallery} -> {out}", as_json)


@data_app.command("export", help=(
    "Export a LanceDB table to a gallery file (.npz, .npy with a .meta.npz sidecar, a Parquet "
    "folder; the format follows --out).\n\n" + TABLE_HELP + "\n\n"
    "By default the rows as served: each row from the newest version whose column holds it, "
    "with row_versions when they differ (what a file backfill writes; the versions must share "
    "a width). --version V exports vec_V alone (every row must have it). Ids, labels and the "
    "table's fingerprint and meta are kept; the payload columns stay in the table.\n\n"
    "--out is replaced only when a compat command wrote it (its meta says which); anything "
    "else there is refused before any work and left as it is.\n\n"
    "Exit codes: 0 exported; 2 usage (an --out that cannot be written, or that holds "
    "something compat did not write); 3 the table is missing; 4 bad input (no such column, "
    "null rows in it, versions of several widths, no labels for an .npz); 5 the disk is full "
    "or read-only."
))  # fmt: skip
def export(
    gallery: Path = typer.Option(..., "--gallery", "-g", help="The table: a .lance folder."),
    out: Path = typer.Option(
        ..., "--out", "-o", help="Gallery file: .npz, .npy or a folder (Parquet)."
    ),
    version: str | None = typer.Option(
        None, "--version", help="Export this version's column (default: the rows as served)."
    ),
) -> None:
    with exit_on_error():
        from compat.embeddings.table import check_version
        from compat.embeddings.table_write import export_table

        if version is not None:
            check_version(version, "--version")
        n, dim, what = export_table(gallery, out, version=version)
    typer.echo(f"export: {n} x {dim} {what} of {gallery}; wrote {out}")


@data_app.command("show", help=(
    "Show what a LanceDB table gallery holds: its rows, and per vector column its version, "
    "width, the rows it holds, its model's weights and where its rows came from.\n\n"
    + TABLE_HELP + "\n\nExit codes: 0 shown; 2 usage; 3 the table is missing; 4 a table that "
    "is not a gallery (no ids, duplicate ids, a vector column of the wrong width or type)."
))  # fmt: skip
def show(
    gallery: Path = typer.Argument(..., help="The table: a .lance folder."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    with exit_on_error():
        from compat.embeddings.table import open_table

        table = open_table(gallery)
        table.check_ids()
    _say_table(table, str(gallery), as_json)


def _say_table(table, title: str, as_json: bool) -> None:
    """What a table holds: rows, version, and per vector column its facts."""
    valid = table.valid(list(table.vectors))
    columns = {
        name: {"version": c.version, "dim": c.dim, "rows": int(valid[name].sum()),
               "weights_sha256": c.weights_sha256, "sources": c.sources}
        for name, c in table.vectors.items()
    }  # fmt: skip
    facts = {
        "table": str(table.path), "rows": table.n, "table_version": int(table.ds.version),
        "label": table.has_label, "payload": table.payload, "fingerprint": table.fingerprint,
        "columns": columns,
    }  # fmt: skip
    if as_json:
        typer.echo(json.dumps(facts, sort_keys=True))
        return
    from compat.cli import output

    rows = [
        [name, c["version"], str(c["dim"]), f"{c['rows']:,} of {table.n:,}",
         (c["weights_sha256"] or "-")[:12], ", ".join(s.get("kind", "?") for s in c["sources"])]
        for name, c in columns.items()
    ]  # fmt: skip
    output.print_table(
        ("column", "version", "dim", "rows", "weights", "sources"),
        rows,
        title=f"{title}: {table.n:,} rows, table version {table.ds.version}",
        caption=f"payload: {', '.join(table.payload) or 'none'}; label: "
        f"{'yes' if table.has_label else 'no'}",
    )


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
