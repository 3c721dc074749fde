import json
from pathlib import Path

from PIL import Image
from typer.testing import CliRunner

from compat.cli.main import app

runner = CliRunner()


def test_data_info_json(tiny_source):
    path = Path(tiny_source.root) / "source.json"
    r = runner.invoke(app, ["data", "info", "--source", str(path), "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["items"] == 240 and info["classes"] == 40 and info["image_size"] == 16


def test_data_info_table(tiny_source):
    r = runner.invoke(
        app, ["data", "info", "--source", str(Path(tiny_source.root) / "source.json")]
    )
    assert r.exit_code == 0 and "fingerprint" in r.stdout


def test_data_preview_writes_a_png(tiny_source, tmp_path: Path):
    out = tmp_path / "p.png"
    r = runner.invoke(
        app,
        [
            "data",
            "preview",
            "--source",
            str(Path(tiny_source.root) / "source.json"),
            "--out",
            str(out),
            "--classes",
            "3",
            "--per-class",
            "4",
            "--scale",
            "1",
        ],
    )
    assert r.exit_code == 0, r.output
    assert Image.open(out).size == (4 * 16, 3 * 16)


def test_data_info_missing_source_exits_3(tmp_path: Path):
    r = runner.invoke(app, ["data", "info", "--source", str(tmp_path / "none.json")])
    assert r.exit_code == 3
    assert "run the data stage first" in r.stderr


def test_data_preview_on_a_full_disk_is_exit_5_in_one_line(tiny_source, small_disk):
    """issue 31 item 2: an OSError traceback before; now one line naming the file and the
    bytes the picture needs, and nothing half-written on the disk."""
    disk = small_disk("16k")
    out = disk / "p.png"
    r = runner.invoke(
        app,
        ["data", "preview", "--source", str(Path(tiny_source.root) / "source.json"),
         "--out", str(out), "--scale", "8"],
    )  # fmt: skip
    assert r.exit_code == 5, r.output
    [line] = r.output.strip().splitlines()
    assert line.startswith(f"error: {out}: cannot write: no space left on the device (needs ")
    assert " bytes), " in line and line.endswith(" free)")
    assert list(disk.iterdir()) == []


def test_data_preview_with_an_injected_full_disk(tiny_source, tmp_path, monkeypatch):
    import errno
    import os

    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_bytes", full)
    out = tmp_path / "p.png"
    r = runner.invoke(
        app, ["data", "preview", "--source", str(Path(tiny_source.root) / "source.json"),
              "--out", str(out)],
    )  # fmt: skip
    assert r.exit_code == 5 and "p.png: cannot write: no space left on the device" in r.output
    assert list(tmp_path.iterdir()) == []
