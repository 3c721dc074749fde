"""Bad input never ends in a traceback (issue 15): one table of cases, each run the way a user
runs it (a stage script's ``main``, or the ``compat`` CLI through typer's runner).

Every case must end with its documented exit code (docs/design.md "Exit codes": 2 usage, 3 not
found, 4 bad input), one line of output naming the file and the field, no traceback, and nothing
half-written: no ``*.tmp`` anywhere and, for the data stage, no ``data/source.json``. The first
block holds the cases that once ended in a traceback or a wrong code; the second pins cases that
already worked, so they stay working. Below the table: a damaged render cache heals itself, and a
train stage killed inside its final weights save leaves no temporary behind once re-run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import stat
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
_STAGES: dict[str, object] = {}


def _stage(name: str):
    """The module of ``stages/<name>.py`` (loaded once; its ``main(argv)`` is the script)."""
    if name not in _STAGES:
        spec = importlib.util.spec_from_file_location(
            f"stage_{name}", REPO / "stages" / f"{name}.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _STAGES[name] = module
    return _STAGES[name]


# -- tiny fixtures ------------------------------------------------------------------------------


def _png(path: Path, size: int = 8, value: int = 128) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("L", (size, size), value).save(path)


def _png_header_only(path: Path, width: int, height: int) -> None:
    """A valid PNG of a few dozen bytes declaring ``width x height`` (a decompression bomb: its
    pixels would only exist once decoded)."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )


def _folder(root: Path, classes: int = 2, per_class: int = 2) -> Path:
    for c in range(classes):
        for i in range(per_class):
            _png(root / f"c{c}" / f"{i}.png", value=40 * c + i)
    return root


def _params(tmp: Path, text: str | bytes, name: str = "params.yaml") -> str:
    path = tmp / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return name


def _folder_params(tmp: Path, root: str = "imgs") -> list[str]:
    return ["--params", _params(tmp, f"data: {{kind: folder, root: {root}, size: 8}}\n")]


def _manifest_params(tmp: Path, rows: str | bytes, header: str = "path,label") -> list[str]:
    _folder(tmp / "imgs")
    body = rows if isinstance(rows, bytes) else rows.encode()
    (tmp / "imgs" / "list.csv").write_bytes(header.encode() + b"\n" + body)
    return [
        "--params",
        _params(tmp, "data: {kind: manifest, manifest: imgs/list.csv, size: 8}\n"),
    ]


def _train_params(tmp: Path, entry: str) -> list[str]:
    return ["v1", "--params", _params(tmp, f"train:\n  v1: {entry}\n")]


def _contract(tmp: Path, text: str | bytes) -> list[str]:
    path = tmp / "v2.yaml"
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    return ["contract", "validate", "v2.yaml"]


CONTRACT = "version: v2\nparent: v1\nembedding_dim: 8\nhead: cosface\ncriteria: []\n"


def _npz(path: Path, **arrays: np.ndarray) -> str:
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path.name


def _score(tmp: Path, query_dim: int = 8, **query: np.ndarray) -> list[str]:
    labels = np.arange(4)
    q = query or {"embeddings": np.ones((4, query_dim), np.float32), "labels": labels}
    g = {"embeddings": np.ones((4, 8), np.float32), "labels": labels}
    return ["score", "-q", _npz(tmp / "q.npz", **q), "-g", _npz(tmp / "g.npz", **g)]


# -- setups of the cases that once failed badly -------------------------------------------------


def _manifest_not_utf8(tmp: Path) -> list[str]:
    return _manifest_params(tmp, b"c0/0.png,c0\nc0/1.png,\xff\xfe\n")


def _bomb_in_folder(tmp: Path) -> list[str]:
    _folder(tmp / "imgs")
    _png_header_only(tmp / "imgs" / "c1" / "bomb.png", 100_000, 100_000)
    return _folder_params(tmp)


def _large_in_manifest(tmp: Path) -> list[str]:
    args = _manifest_params(tmp, "c0/0.png,c0\nc1/big.png,c1\n")
    _png_header_only(tmp / "imgs" / "c1" / "big.png", 9000, 9000)  # under Pillow's own limit
    return args


def _symlink_file_escapes(tmp: Path) -> list[str]:
    _folder(tmp / "imgs")
    _png(tmp / "secret" / "s.png")
    (tmp / "imgs" / "c0" / "s.png").symlink_to(tmp / "secret" / "s.png")
    return _folder_params(tmp)


def _symlink_class_escapes(tmp: Path) -> list[str]:
    _folder(tmp / "imgs")
    _png(tmp / "secret" / "s.png")
    (tmp / "imgs" / "c9").symlink_to(tmp / "secret", target_is_directory=True)
    return _folder_params(tmp)


def _params_folder(tmp: Path) -> list[str]:
    (tmp / "params.yaml").mkdir()
    return ["--params", "params.yaml"]


def _data_is_a_file(tmp: Path) -> list[str]:
    _folder(tmp / "imgs")
    (tmp / "data").write_text("not a folder")
    return _folder_params(tmp)


def _manifest_names_a_fifo(tmp: Path) -> list[str]:
    args = _manifest_params(tmp, "c0/0.png,c0\nc1/pipe.png,c1\n")
    os.mkfifo(tmp / "imgs" / "c1" / "pipe.png")  # opening it for reading blocks forever
    return args


def _manifest_field_too_long(tmp: Path) -> list[str]:
    return _manifest_params(tmp, "c0/0.png,c0\nc1/0.png," + "x" * 200_000 + "\n")


def _zip_member(path: Path, member: str, *, method: int | None = None, flags: int | None = None):
    """Rewrite a member's method or flag bits in its local and central zip headers."""
    data = bytearray(path.read_bytes())
    name = member.encode()
    for sig, flag_at, name_at in ((b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)):
        start = 0
        while (i := data.find(sig, start)) >= 0:
            start = i + 4
            if data[i + name_at : i + name_at + len(name)] == name:
                if flags is not None:
                    struct.pack_into("<H", data, i + flag_at, flags)
                if method is not None:
                    struct.pack_into("<H", data, i + flag_at + 2, method)
    path.write_bytes(bytes(data))


def _score_npz_member(tmp: Path, **patch: int) -> list[str]:
    argv = _score(tmp)
    _zip_member(tmp / "q.npz", "embeddings.npy", **patch)
    return argv


def _null_embedding_row(tmp: Path) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp / "q").mkdir()
    mask = pa.array([False, True, False, False])
    emb = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(32, np.float32)), 8, mask=mask)
    pq.write_table(pa.table({"id": list("abcd"), "embedding": emb, "label": range(4)}),
                   tmp / "q" / "part-0.parquet")  # fmt: skip
    _npz(tmp / "g.npz", embeddings=np.ones((4, 8), np.float32), labels=np.arange(4))
    return ["score", "-q", "q", "-g", "g.npz"]


def _backfill(tmp: Path, out: str, gallery: str = "g.npz") -> list[str]:
    import torch

    from compat.maps.psi import UpgradeModule, save_upgrade

    torch.manual_seed(0)
    save_upgrade(tmp / "models" / "v2" / "upgrade", UpgradeModule(8, 8, hidden=8).eval(),
                 {"from": "v1", "to": "v2", "loss": "mse"})  # fmt: skip
    rows = np.eye(8, dtype=np.float32)
    if gallery.endswith(".npz"):
        _npz(tmp / gallery, embeddings=rows, labels=np.arange(8), version=np.asarray("v1"))
    else:
        from compat.embeddings.formats import write_shard

        (tmp / gallery).mkdir(parents=True)
        write_shard(tmp / gallery / "part-0.parquet", np.asarray([str(i) for i in range(8)]),
                    rows, np.arange(8), np.full(8, "v1"))  # fmt: skip
    return ["backfill", "--gallery", gallery, "--from", "v1", "--to", "v2", "--out", out,
            "--no-progress"]  # fmt: skip


def _backfill_out_holds_input(tmp: Path) -> list[str]:
    return _backfill(tmp, "DIR", gallery="DIR/g")


def _backfill_out_not_a_gallery(tmp: Path) -> list[str]:
    (tmp / "up").mkdir()
    (tmp / "up" / "notes.txt").write_text("mine")
    return _backfill(tmp, "up")


# -- setups of round 3's last cases: files that are not regular files, outputs led outside ------


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)  # opening it for reading blocks until a writer comes: forever
    return path


def _outside(tmp: Path) -> Path:
    """A folder next to the project (``tmp``), outside it."""
    out = tmp.parent / f"{tmp.name}-outside"
    out.mkdir(exist_ok=True)
    return out


def _link_out(tmp: Path, rel: str) -> None:
    """``rel`` inside the project made a symlink to a folder outside it."""
    (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
    (tmp / rel).symlink_to(_outside(tmp), target_is_directory=True)


def _split_out_escapes(tmp: Path) -> list[str]:
    from compat.data.config import EmbeddedData
    from compat.data.sources import build_source

    build_source(EmbeddedData(classes=30, images_per_class=4, size=16, workers=1,
                              cache=str(tmp / "c")), tmp / "data")  # fmt: skip
    _link_out(tmp, "splits")
    split = (
        "split: {eval: {classes: 10, pairs: 40}, scenarios: [{kind: chain, fractions: {v1: 1.0}}]}"
    )
    return ["--params", _params(tmp, split + "\n")]


def _no_cuda() -> bool:
    import torch

    return not torch.cuda.is_available()


# -- setups of cases that already worked --------------------------------------------------------


def _manifest_escapes(tmp: Path) -> list[str]:
    _png(tmp / "outside.png")
    return _manifest_params(tmp, "c0/0.png,c0\n../outside.png,c1\n")


def _corrupt_image(tmp: Path) -> list[str]:
    _folder(tmp / "imgs")
    (tmp / "imgs" / "c1" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    return _folder_params(tmp)


def _empty_class(tmp: Path) -> list[str]:
    _folder(tmp / "imgs")
    (tmp / "imgs" / "c7").mkdir()
    (tmp / "imgs" / "c7" / "notes.txt").write_text("no images")
    return _folder_params(tmp)


def _source_not_json(tmp: Path) -> list[str]:
    (tmp / "data").mkdir()
    (tmp / "data" / "source.json").write_bytes(b'{"kind": "\xff"')
    return ["data", "info"]


def _malformed_source(tmp: Path) -> list[str]:
    (tmp / "data").mkdir()
    (tmp / "data" / "source.json").write_text(json.dumps({"kind": "folder"}))
    return ["data", "info"]


@dataclass(frozen=True)
class Case:
    id: str
    run: str  # a stage (data, train, split, evaluate, upgrade) or "cli"
    setup: Callable[[Path], list[str]]
    code: int
    fragments: tuple[str, ...]  # each must appear in the one line of output
    prefix: str = "error: "  # contract validate lists problems without it


FIXED = [
    Case("manifest-not-utf8", "data", _manifest_not_utf8, 4,
         ("imgs/list.csv:3", "not valid UTF-8", "data.manifest")),
    Case("decompression-bomb-png", "data", _bomb_in_folder, 4,
         ("bomb.png", "over the cap of 67108864")),
    Case("image-over-the-cap", "data", _large_in_manifest, 4,
         ("big.png", "9000 x 9000", "over the cap of 67108864")),
    Case("folder-file-symlink-escapes", "data", _symlink_file_escapes, 4,
         ("c0/s.png", "outside the root imgs", "data.root")),
    Case("folder-class-symlink-escapes", "data", _symlink_class_escapes, 4,
         ("c9/s.png", "outside the root imgs", "data.root")),
    Case("unknown-method", "train", lambda t: _train_params(t, "{method: bctt}"), 4,
         ("params.yaml: train.v1.method", "unknown method 'bctt'", "known: bct, bct-kd")),
    Case("unknown-backbone", "train", lambda t: _train_params(t, "{backbone: resnet9}"), 4,
         ("params.yaml: train.v1.backbone", "known: resnet18, resnet50, small-cnn, tiny")),
    Case("unknown-head", "train", lambda t: _train_params(t, "{head: sphere}"), 4,
         ("params.yaml: train.v1.head", "known: arcface, cosface")),
    Case("unknown-method-param", "train",
         lambda t: _train_params(t, "{method: bct, method_params: {lamb: 1}}"), 4,
         ("params.yaml: train.v1.method_params.lamb", "Extra inputs")),
    Case("empty-params-data", "data", lambda t: ["--params", _params(t, "")], 4,
         ("params.yaml: (root): the file is empty",)),
    Case("empty-params-train", "train", lambda t: ["v1", "--params", _params(t, "# nothing\n")],
         4, ("params.yaml: (root): the file is empty",)),
    Case("params-is-a-folder", "data", _params_folder, 4,
         ("params.yaml: a folder, not a regular file; expected a YAML file",)),
    Case("data-output-is-a-file", "data", _data_is_a_file, 4,
         ("data: cannot create the output folder (File exists)",)),
    Case("params-not-utf8", "data", lambda t: ["--params", _params(t, b"data:\n  size: \xff\n")],
         4, ("params.yaml: not valid UTF-8 at line 2",)),
    # issue 30 item 10: a FIFO named as an image hung the data stage forever
    Case("manifest-names-a-fifo", "data", _manifest_names_a_fifo, 4,
         ("c1/pipe.png: a FIFO (named pipe), not a regular file",)),
    # issue 30 item 14: tracebacks (_csv.Error, RuntimeError, NotImplementedError, LZMAError,
    # ArrowInvalid)
    Case("manifest-field-over-128k", "data", _manifest_field_too_long, 4,
         ("imgs/list.csv:3: field larger than field limit (131072)", "(data.manifest)")),
    Case("npz-member-encrypted", "cli", lambda t: _score_npz_member(t, flags=1), 4,
         ("q.npz: embeddings: the member is encrypted",)),
    Case("npz-member-deflate64", "cli", lambda t: _score_npz_member(t, method=9), 4,
         ("q.npz: embeddings: compressed with deflate64 (zip method 9)",)),
    Case("npz-member-lzma-damaged", "cli", lambda t: _score_npz_member(t, method=14), 4,
         ("q.npz: embeddings: not a readable .npz member",)),
    Case("parquet-null-embedding-row", "cli", _null_embedding_row, 4,
         ("q/part-0.parquet: embedding: cannot be read", "null rows?")),
    # issue 30 item 1: these deleted the input gallery and the user's notes.txt
    Case("backfill-out-holds-the-input", "cli", _backfill_out_holds_input, 2,
         ("--out DIR: the folder holds the input gallery", "the input is never modified")),
    Case("backfill-out-not-a-gallery", "cli", _backfill_out_not_a_gallery, 2,
         ("--out up: the folder holds files that are not a gallery's (notes.txt)",)),
]  # fmt: skip

WORKING = [
    Case("params-missing", "data", lambda t: ["--params", "nope.yaml"], 3,
         ("nope.yaml: file not found",)),
    Case("params-not-yaml", "data", lambda t: ["--params", _params(t, "data: [1,\n")], 4,
         ("params.yaml: not valid YAML at line",)),
    Case("params-root-a-list", "data", lambda t: ["--params", _params(t, "- data\n")], 4,
         ("params.yaml: (root): expected a mapping",)),
    Case("params-unknown-section", "data", lambda t: ["--params", _params(t, "dta: {}\n")], 4,
         ("params.yaml: dta: Extra inputs are not permitted",)),
    Case("params-unknown-key", "data",
         lambda t: ["--params", _params(t, "data: {kind: embedded, clases: 3}\n")], 4,
         ("params.yaml: data.clases: Extra inputs are not permitted",)),
    Case("params-wrong-type", "data", lambda t: ["--params", _params(t, "data: {kind: folder, root: x, size: abc}\n")],
         4, ("params.yaml: data.size:", "integer")),
    Case("params-out-of-range", "data", lambda t: ["--params", _params(t, "data: {kind: embedded, size: 4}\n")],
         4, ("params.yaml: data.size:", "greater than or equal to 8")),
    Case("params-unknown-kind", "data",
         lambda t: ["--params", _params(t, "data: {kind: zip}\n")], 4,
         ("params.yaml: data", "embedded", "folder", "manifest")),
    Case("params-data-without-kind", "data",
         lambda t: ["--params", _params(t, "data: {classes: 3}\n")], 4,
         ("params.yaml: data: kind: expected one of embedded, folder, manifest",)),
    Case("manifest-missing", "data",
         lambda t: ["--params", _params(t, "data: {kind: manifest, manifest: no.csv}\n")], 3,
         ("no.csv: manifest not found (data.manifest)",)),
    Case("manifest-missing-column", "data", lambda t: _manifest_params(t, "c0/0.png\n", "path"),
         4, ("imgs/list.csv: header: missing column(s) ['label']",)),
    Case("manifest-path-escapes", "data", _manifest_escapes, 4,
         ("imgs/list.csv:3: path '../outside.png' escapes the root",)),
    Case("manifest-listed-twice", "data",
         lambda t: _manifest_params(t, "c0/0.png,c0\nc0/./0.png,c0\n"), 4,
         ("imgs/list.csv:3: path 'c0/./0.png' is listed twice",)),
    Case("manifest-image-missing", "data",
         lambda t: _manifest_params(t, "c0/0.png,c0\nc1/gone.png,c1\n"), 4,
         ("c1/gone.png: image file not found",)),
    Case("corrupt-image", "data", _corrupt_image, 4,
         ("c1/broken.png: unreadable or corrupt image",)),
    Case("folder-missing", "data", lambda t: _folder_params(t, "nowhere"), 3,
         ("nowhere: image folder not found (data.root)",)),
    Case("folder-empty-class", "data", _empty_class, 4, ("c7: empty class",)),
    Case("train-unknown-version", "train",
         lambda t: ["v9", "--params", _params(t, "train:\n  v1: {}\n")], 3,
         ("params.yaml: train.v9: no such version (known: v1)",)),
    Case("train-bad-epochs", "train", lambda t: _train_params(t, "{epochs: 0}"), 4,
         ("params.yaml: train.v1.epochs:", "greater than or equal to 1")),
    Case("train-no-data-source", "train", lambda t: _train_params(t, "{backbone: tiny}"), 3,
         ("data/source.json: no data source",)),
    Case("split-unknown-key", "split",
         lambda t: ["--params", _params(t, "split: {eval: {clases: 3}}\n")], 4,
         ("params.yaml: split.eval.clases: Extra inputs are not permitted",)),
    Case("evaluate-unknown-protocol", "evaluate",
         lambda t: ["--params", _params(t, "evaluate: {chain: [v1], protocols: [rank]}\n")], 4,
         ("params.yaml: evaluate.protocols: unknown protocol 'rank'; known: identification",)),
    Case("upgrade-unknown-loss", "upgrade",
         lambda t: ["v2", "--params", _params(t, "upgrade:\n  v2: {from: v1, loss: l1}\n")], 4,
         ("params.yaml: upgrade.v2.loss:", "'mse' or 'cosine'")),
    Case("contract-not-utf8", "cli",
         lambda t: _contract(t, b"version: v2\nparent: \xff\xfe\n"), 4,
         ("v2.yaml: line 2: not valid UTF-8",), prefix=""),
    Case("contract-not-yaml", "cli", lambda t: _contract(t, "version: [v2\n"), 4,
         ("v2.yaml: line 2: not valid YAML",), prefix=""),
    Case("contract-unknown-field", "cli", lambda t: _contract(t, CONTRACT + "colour: red\n"), 4,
         ("v2.yaml: colour: Extra inputs are not permitted",), prefix=""),
    Case("contract-unknown-head", "cli",
         lambda t: _contract(t, CONTRACT.replace("cosface", "cosfase")), 4,
         ("v2.yaml: head: unknown head 'cosfase'",), prefix=""),
    Case("contract-missing", "cli", lambda t: ["contract", "validate", "v7.yaml"], 3,
         ("v7.yaml: contract not found",)),
    Case("embedding-dim-mismatch", "cli", lambda t: _score(t, query_dim=16), 4,
         ("q.npz: embeddings: dimension 16 does not match g.npz dimension 8",)),
    Case("embeddings-without-labels", "cli",
         lambda t: _score(t, embeddings=np.ones((4, 8), np.float32)), 4,
         ("q.npz: labels: missing key",)),
    Case("embeddings-missing", "cli", lambda t: ["score", "-q", "no.npz", "-g", "no.npz"], 3,
         ("no.npz: file not found",)),
    Case("unknown-protocol-option", "cli", lambda t: [*_score(t), "-p", "rank"], 2,
         ("unknown protocol 'rank'; known: identification",)),
    Case("source-not-utf8", "cli", _source_not_json, 4,
         ("data/source.json: malformed source description (not UTF-8)",)),
    Case("source-malformed", "cli", _malformed_source, 4,
         ("data/source.json: malformed source description",)),
]  # fmt: skip


# -- round 3 (issue 30): names that would be paths, non-finite floats, duplicate keys,
# sizes without bounds, devices ------------------------------------------------------------

_LOOP_DATA = "data: {kind: embedded, classes: 20, images_per_class: 2}\n"

ROUND3 = [
    Case("train-version-escapes", "train",
         lambda t: ["../../escaped_train", "--params", _params(t, "train:\n  v1: {}\n")], 4,
         ("params.yaml: train.../../escaped_train", "no '..'")),
    Case("train-parent-escapes", "train", lambda t: _train_params(t, "{parent: ../x}"), 4,
         ("params.yaml: train.v1.parent", "name '../x'")),
    Case("train-split-escapes", "train", lambda t: _train_params(t, "{split: ../../etc}"), 4,
         ("params.yaml: train.v1.split", "name '../../etc'")),
    Case("upgrade-version-escapes", "upgrade",
         lambda t: ["../v2", "--params", _params(t, "upgrade:\n  v2: {from: v1}\n")], 4,
         ("params.yaml: upgrade.../v2", "no '..'")),
    Case("evaluate-chain-escapes", "evaluate",
         lambda t: ["--params", _params(t, "evaluate: {chain: [v1, ../../x]}\n")], 4,
         ("params.yaml: evaluate.chain.1", "name '../../x'")),
    Case("split-set-name-escapes", "split",
         lambda t: ["--params", _params(t, "split: {scenarios: [{kind: chain, fractions: {../v1: 1.0}}]}\n")],
         4, ("params.yaml: split.scenarios.0.fractions.../v1", "no '..'")),
    Case("train-nan-lam", "train",
         lambda t: _train_params(t, "{method: bct, parent: v0, method_params: {lam: .nan}}"), 4,
         ("params.yaml: train.v1.method_params.lam", "finite")),
    Case("train-inf-lr", "train", lambda t: _train_params(t, "{lr: .inf}"), 4,
         ("params.yaml: train.v1.lr", "finite")),
    Case("upgrade-val-fraction-zero", "upgrade",
         lambda t: ["v2", "--params", _params(t, "upgrade:\n  v2: {from: v1, val_fraction: 0}\n")],
         4, ("params.yaml: upgrade.v2", "val_fraction: 0 holds nothing out")),
    Case("params-duplicate-key", "data",
         lambda t: ["--params", _params(t, "data:\n  size: 32\n  size: 16\n")], 4,
         ("params.yaml: data.size", "given twice (lines 2 and 3)")),
    Case("contract-duplicate-key", "cli",
         lambda t: _contract(t, CONTRACT + "head: arcface\n"), 4,
         ("v2.yaml: head", "given twice (lines 4 and 6)"), prefix=""),
    Case("data-images-per-class-unbounded", "data",
         lambda t: ["--params", _params(t, "data: {kind: embedded, images_per_class: 1000000000}\n")],
         4, ("params.yaml: data", "images_per_class", "GiB limit")),
    Case("split-pairs-unbounded", "split",
         lambda t: ["--params", _params(t, "split: {eval: {pairs: 10000000000000}}\n")], 4,
         ("params.yaml: split.eval.pairs", "between 2 and 10,000,000 pairs")),
    Case("train-dim-unbounded", "train", lambda t: _train_params(t, "{dim: 1000000000000}"), 4,
         ("params.yaml: train.v1.dim", "less than or equal to 65536")),
    Case("evaluate-device-bogus", "evaluate",
         lambda t: ["--params", _params(t, "evaluate: {chain: [v1], device: bogus}\n")], 4,
         ("params.yaml: evaluate.device", "pattern")),
    # files that are not regular files: a FIFO blocks a plain open forever
    Case("params-is-a-fifo", "data", lambda t: ["--params", str(_fifo(t / "params.yaml"))], 4,
         ("params.yaml: a FIFO (named pipe), not a regular file",)),
    Case("source-json-is-a-fifo", "split",
         lambda t: [_fifo(t / "data" / "source.json"), "--params", _params(t, "{}\n")][1:], 4,
         ("data/source.json: a FIFO (named pipe), not a regular file",)),
    Case("eval-manifest-is-a-fifo", "evaluate",
         lambda t: [_fifo(t / "splits" / "eval.json"),
                    "--params", _params(t, "evaluate: {chain: [v1], device: cpu}\n")][1:], 4,
         ("splits/eval.json: a FIFO (named pipe), not a regular file",)),
    # outputs computed from names, led outside the project by a symlink
    Case("split-output-symlinked-out", "split", _split_out_escapes, 4,
         ("split: output splits/v1.json", "outside")),
    Case("upgrade-output-symlinked-out", "upgrade",
         lambda t: [_link_out(t, "models/v2/upgrade"), "v2",
                    "--params", _params(t, "upgrade:\n  v2: {from: v1}\n")][1:], 4,
         ("upgrade.v2: output folder models/v2/upgrade", "outside")),
    Case("train-checkpoints-symlinked-out", "train",
         lambda t: [_link_out(t, "cache/checkpoints/v1"), *_train_params(t, "{}")][1:], 4,
         ("train.v1: checkpoint folder cache/checkpoints/v1", "outside")),
]  # fmt: skip

# Devices this machine lacks (case 15): exit 4 naming the field in params, exit 2 on the
# command line (a usage error). Only where there is no CUDA device.
NO_CUDA = [
    Case("evaluate-device-cuda-absent", "evaluate",
         lambda t: ["--params", _params(t, "evaluate: {chain: [v1], device: cuda}\n")], 4,
         ("params.yaml: evaluate.device", "CUDA is not available")),
    Case("train-device-cuda-absent", "train", lambda t: _train_params(t, "{device: cuda}"), 4,
         ("train.v1.device: cuda requested but no CUDA device is available",)),
    Case("upgrade-device-cuda-absent", "upgrade",
         lambda t: ["v2", "--params", _params(t, "upgrade:\n  v2: {from: v1, device: cuda}\n")],
         4, ("upgrade.v2.device: cuda requested but no CUDA device is available",)),
    Case("score-device-cuda-absent", "cli", lambda t: [*_score(t), "--device", "cuda"], 2,
         ("device 'cuda': CUDA is not available on this machine",)),
    Case("backfill-device-cuda-absent", "cli",
         lambda t: [*_backfill(t, "up.npz"), "--device", "cuda:1"], 2,
         ("device 'cuda:1': CUDA is not available on this machine",)),
]  # fmt: skip


def _run(case: Case, tmp: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = case.setup(tmp)
    if case.run == "cli":
        from compat.cli.main import app

        result = CliRunner().invoke(app, argv)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            f"{type(result.exception).__name__}: {result.exception}"
        )
        return result.exit_code, result.output
    code = _stage(case.run).main(argv)
    out = capsys.readouterr()
    return code, out.err + out.out


@pytest.mark.timeout(120)  # a case that hangs (a FIFO read) fails instead of blocking the run
@pytest.mark.parametrize(
    "case",
    FIXED
    + WORKING
    + ROUND3
    + [
        pytest.param(c, marks=pytest.mark.skipif(not _no_cuda(), reason="a CUDA device is here"))
        for c in NO_CUDA
    ],
    ids=lambda c: c.id,
)
def test_bad_input(case: Case, in_tmp: Path, capsys: pytest.CaptureFixture[str]):
    code, output = _run(case, in_tmp, capsys)
    lines = output.strip().splitlines()
    assert code == case.code, output
    assert "Traceback" not in output
    assert len(lines) == 1, output
    assert lines[0].startswith(case.prefix), lines[0]
    for fragment in case.fragments:
        assert fragment in lines[0], lines[0]
    assert not list(in_tmp.rglob("*.tmp")), "a temporary file was left behind"
    if case.setup in (_backfill_out_holds_input, _backfill_out_not_a_gallery):
        assert not list(in_tmp.rglob(".*backfill*")), "a work folder or lock was left behind"
        assert (in_tmp / "DIR" / "g" / "part-0.parquet").exists() or (
            in_tmp / "up" / "notes.txt"
        ).read_text() == "mine"
    if case.run == "data":
        assert not (in_tmp / "data" / "source.json").exists(), "half a data stage was written"


def test_the_table_is_as_large_as_promised():
    assert len(WORKING) >= 20
    cases = FIXED + WORKING + ROUND3 + NO_CUDA
    assert len({c.id for c in cases}) == len(cases)


def test_a_script_prints_one_line_and_no_traceback(in_tmp: Path):
    """The same through a real interpreter, as DVC runs a stage: exit code and stderr only."""
    args = _manifest_not_utf8(in_tmp)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(REPO / "stages" / "data.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 4
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: imgs/list.csv:3: not valid UTF-8 (byte 0xff); save the manifest as UTF-8 "
        "(data.manifest)"
    ]


# -- a damaged render cache heals itself ---------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncate", "garbage", "wrong-shape"])
def test_a_damaged_render_cache_is_rendered_again(in_tmp, capsys, caplog, damage):
    args = [
        "--params",
        _params(
            in_tmp,
            "data: {kind: embedded, classes: 2, images_per_class: 2, size: 8, workers: 1, cache: cache}\n",
        ),
    ]
    assert _stage("data").main(args) == 0
    [entry] = (in_tmp / "cache").glob("glyphs-*.npy")
    good = entry.read_bytes()
    glyphs = (in_tmp / "data" / "glyphs.npy").read_bytes()
    if damage == "truncate":
        entry.write_bytes(good[: len(good) // 2])
    elif damage == "garbage":
        entry.write_bytes(b"not an array at all")
    else:
        np.save(entry, np.zeros((3, 8, 8, 1), np.uint8))
    (in_tmp / "data" / "glyphs.npy").unlink()
    capsys.readouterr()

    assert _stage("data").main(args) == 0
    assert entry.read_bytes() == good  # rendered again and stored again
    assert (in_tmp / "data" / "glyphs.npy").read_bytes() == glyphs
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    where = str(entry.relative_to(in_tmp))  # the cache folder as params.yaml names it
    assert len(warnings) == 1 and where in warnings[0] and "rendering again" in warnings[0]
    assert not list(in_tmp.rglob("*.tmp"))


def test_an_unwritable_render_cache_is_skipped_with_a_warning(in_tmp, caplog):
    (in_tmp / "cache").write_text("a file where the cache folder should be")
    args = [
        "--params",
        _params(
            in_tmp,
            "data: {kind: embedded, classes: 2, images_per_class: 2, size: 8, workers: 1, "
            "cache: cache}\n",
        ),
    ]
    assert _stage("data").main(args) == 0
    assert np.load(in_tmp / "data" / "glyphs.npy").shape == (4, 8, 8, 1)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "cannot write the render cache" in warnings[0]


# -- item 7: outputs keep the umask; a kill in the final save leaves nothing behind --------------

_KILL_IN_WEIGHTS_SAVE = """
import os, pathlib, runpy, signal, sys
real = pathlib.Path.write_bytes
def write_bytes(self, data):
    if self.name.startswith(".weights.safetensors.") and self.name.endswith(".tmp"):
        real(self, data[: len(data) // 2])  # half of the weights are on disk
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, data)
pathlib.Path.write_bytes = write_bytes
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _train_project(root: Path) -> None:
    from compat.data.config import FolderData
    from compat.data.sources import build_source
    from compat.io import fingerprint, write_json

    _folder(root / "imgs", classes=4, per_class=4)
    source = build_source(FolderData(kind="folder", root="imgs", size=8), root / "data")
    items = [item.id for item in source.items]
    labels = [item.label for item in source.items]
    body = {
        "name": "v1",
        "scenario": "test",
        "source_fingerprint": source.fingerprint,
        "classes": sorted(set(labels)),
        "items": items,
        "labels": labels,
    }
    write_json(root / "splits" / "v1.json", {**body, "fingerprint": fingerprint(body)})
    (root / "params.yaml").write_text(
        "train:\n  v1: {backbone: tiny, dim: 8, batch_size: 8, epochs: 1, device: cpu, "
        "threads: 1}\n"
    )


@pytest.mark.slow  # ~9 s: a real training killed and re-run (the default run kills backfills and promotions)
@pytest.mark.timeout(300)
def test_a_kill_inside_the_final_weights_save_leaves_nothing_after_the_rerun(in_tmp):
    _train_project(in_tmp)
    scratch = in_tmp / "tmpdir"  # the process's TMPDIR: nothing may stay in it either
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TMPDIR": str(scratch)}
    stage = [str(REPO / "stages" / "train.py"), "v1", "--no-progress"]

    def run(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *cmd], env=env, capture_output=True, text=True, umask=0o022
        )

    killed = run("-c", _KILL_IN_WEIGHTS_SAVE, *stage)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    version = in_tmp / "models" / "v1"
    assert [p.name.startswith(".weights.safetensors.") for p in version.glob("*.tmp")] == [True]
    assert not (version / "card.json").exists() and not (version / "weights.safetensors").exists()

    rerun = run(*stage)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert not list(in_tmp.rglob("*.tmp")), "the killed run's temporary is still there"
    assert not list(scratch.glob("compat-*"))  # (torch keeps its own compile cache there)
    for name in ("weights.safetensors", "card.json", "train_metrics.json"):
        assert stat.S_IMODE((version / name).stat().st_mode) == 0o644, name
