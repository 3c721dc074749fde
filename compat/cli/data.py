"""``compat data``: look at the image source the data stage produced."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from compat.cli.common import App, exit_on_error

data_app = App(
    help="Inspect the image source (data/source.json).\n\n"
    "Exit codes: 0 success; 2 usage (bad option); 3 the source file (or an image) not found; 4 a "
    "malformed source file or an unreadable image; 5 (preview) a full disk, spent quota or "
    "read-only file system.",
    no_args_is_help=True,
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


@data_app.command("preview")
def preview(
    out: Path = typer.Option(Path("preview.png"), help="PNG file to write"),
    source: Path = typer.Option(Path("data/source.json"), help="the data stage's source file"),
    classes: int = typer.Option(8, min=1, help="rows: one class each"),
    per_class: int = typer.Option(10, min=1, help="columns: images of the class"),
    scale: int = typer.Option(2, min=1, max=8, help="pixel magnification"),
) -> None:
    """Write a grid of images (one class per row) to see what the models train on.

    Exit codes: 0 the PNG written; 2 usage (bad option); 3 the source file or an image not
    found; 4 a malformed source file or an unreadable image; 5 a full disk, spent quota or
    read-only file system writing --out (the path and the bytes needed named)."""
    import io

    import numpy as np
    from PIL import Image

    from compat.data.sources import open_source
    from compat.io import write_bytes

    with exit_on_error():
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
        img.save(png, format="PNG")
        write_bytes(out, png.getvalue())  # a full disk: one line naming out and the bytes
    typer.echo(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
