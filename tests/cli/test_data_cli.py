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
