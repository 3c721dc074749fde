"""EmbeddingBundle files: round trip and every documented validation error."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from compat.embeddings.bundle import EmbeddingBundle, load_bundle, save_bundle
from compat.errors import BadInputError, NotFoundError


def _write(path, **arrays):
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def test_round_trip_keeps_every_field(tmp_path):
    b = EmbeddingBundle(
        embeddings=np.arange(6, dtype=np.float64).reshape(3, 2),
        labels=np.array([1, 2, 2]),
        ids=["a", "b", "c"],
        version="v2",
        fingerprint="abc123",
        row_versions=["v1", "v2", "v2"],
        meta={"k": [1, 2]},
    )
    path = save_bundle(tmp_path / "g.npz", b)
    out = load_bundle(path)
    assert out.embeddings.dtype == np.float32 and out.labels.dtype == np.int64
    np.testing.assert_array_equal(out.embeddings, b.embeddings)
    np.testing.assert_array_equal(out.labels, [1, 2, 2])
    assert out.ids == ["a", "b", "c"]
    assert (out.version, out.fingerprint) == ("v2", "abc123")
    assert out.row_versions == ["v1", "v2", "v2"]
    assert out.meta == {"k": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["g.npz"]  # no temporary left behind


def test_suffixless_path_is_written_exactly_there(tmp_path):
    b = EmbeddingBundle(np.ones((1, 2)), np.array([0]))
    save_bundle(tmp_path / "plain", b)
    assert (tmp_path / "plain").is_file()
    assert load_bundle(tmp_path / "plain").dim == 2


def test_minimal_file_and_integral_float_labels(tmp_path):
    p = _write(
        tmp_path / "q.npz", embeddings=np.ones((2, 3), np.float32), labels=np.array([1.0, 7.0])
    )
    out = load_bundle(p)
    assert out.labels.tolist() == [1, 7] and out.ids is None and out.meta == {}


def test_missing_file_is_not_found(tmp_path):
    with pytest.raises(NotFoundError, match=r"nope.npz: file not found"):
        load_bundle(tmp_path / "nope.npz")


BAD = {
    "no embeddings": ({"labels": np.array([1])}, r"embeddings: missing key"),
    "no labels": ({"embeddings": np.ones((1, 2))}, r"labels: missing key"),
    "empty rows": (
        {"embeddings": np.ones((0, 2)), "labels": np.array([], int)},
        r"embeddings: empty",
    ),
    "empty dims": (
        {"embeddings": np.ones((2, 0)), "labels": np.array([1, 2])},
        r"embeddings: empty",
    ),
    "1-D": (
        {"embeddings": np.ones(3), "labels": np.array([1, 2, 3])},
        r"embeddings: expected a 2-D",
    ),
    "NaN": (
        {"embeddings": np.array([[1.0, np.nan]]), "labels": np.array([1])},
        r"embeddings: NaN or inf",
    ),
    "inf": ({"embeddings": np.array([[1.0], [np.inf]]), "labels": np.array([1, 2])}, r"row 1"),
    "overflow": ({"embeddings": np.array([[1e300]]), "labels": np.array([1])}, r"NaN or inf"),
    "string embeddings": (
        {"embeddings": np.array([["a"]]), "labels": np.array([1])},
        r"real numbers",
    ),
    "fractional labels": (
        {"embeddings": np.ones((2, 2)), "labels": np.array([1.0, 1.5])},
        r"labels: not an integer",
    ),
    "string labels": (
        {"embeddings": np.ones((2, 2)), "labels": np.array(["a", "b"])},
        r"labels: expected integers",
    ),
    "bool labels": (
        {"embeddings": np.ones((2, 2)), "labels": np.array([True, False])},
        r"labels: expected integers",
    ),
    "NaN labels": ({"embeddings": np.ones((1, 2)), "labels": np.array([np.nan])}, r"labels: NaN"),
    "2-D labels": (
        {"embeddings": np.ones((2, 2)), "labels": np.ones((2, 1), int)},
        r"labels: expected a 1-D",
    ),
    "count": (
        {"embeddings": np.ones((3, 2)), "labels": np.array([1, 2])},
        r"labels: 2 labels for 3 embedding rows",
    ),
    "empty labels": (
        {"embeddings": np.ones((1, 2)), "labels": np.array([], int)},
        r"labels: empty",
    ),
    "ids count": (
        {"embeddings": np.ones((2, 2)), "labels": np.array([1, 2]), "ids": np.array(["a"])},
        r"ids: expected 2 strings",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_names_file_and_field(tmp_path, case):
    arrays, pattern = BAD[case]
    p = _write(tmp_path / "bad.npz", **arrays)
    with pytest.raises(BadInputError, match=pattern) as info:
        load_bundle(p)
    assert str(info.value).startswith(f"{p}: ")
    assert "\n" not in str(info.value)


def test_pickled_object_arrays_are_refused_never_loaded(tmp_path):
    p = _write(
        tmp_path / "obj.npz", embeddings=np.ones((2, 2)), labels=np.array([1, "x"], dtype=object)
    )
    with pytest.raises(BadInputError, match=r"labels: stored as Python objects"):
        load_bundle(p)


@pytest.mark.parametrize("content", [b"not an archive", pickle.dumps({"embeddings": 1})])
def test_non_npz_files_are_bad_input(tmp_path, content):
    p = tmp_path / "x.npz"
    p.write_bytes(content)
    with pytest.raises(BadInputError, match=r"archive: not an .npz"):
        load_bundle(p)


def test_truncated_archive_is_bad_input(tmp_path):
    p = save_bundle(tmp_path / "t.npz", EmbeddingBundle(np.ones((50, 8)), np.arange(50)))
    p.write_bytes(p.read_bytes()[:200])
    with pytest.raises(BadInputError, match=r"archive"):
        load_bundle(p)


def test_name_replaces_path_in_messages(tmp_path):
    p = _write(tmp_path / "b.npz", embeddings=np.ones((1, 2)))
    with pytest.raises(BadInputError, match=r"^gallery: labels: missing key"):
        load_bundle(p, name="gallery")


def test_dataclass_rejects_inconsistent_arrays():
    with pytest.raises(ValueError, match="labels"):
        EmbeddingBundle(np.ones((2, 2)), np.array([1]))
    with pytest.raises(ValueError, match="ids"):
        EmbeddingBundle(np.ones((2, 2)), np.array([1, 2]), ids=["a"])


# -- only the members compat needs are read, each after its header (issue 30 items 11, 14) -------


def _patch_member(path, member: str, *, method: int | None = None, flags: int | None = None):
    """Rewrite a member's compression method or flag bits in its local and central headers
    (what an archive made by another zip tool, deflate64 or encrypted, carries)."""
    import struct

    data = bytearray(path.read_bytes())
    name = member.encode()
    for sig, flag_at, name_at in ((b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)):
        start = 0
        while (i := data.find(sig, start)) >= 0:
            start = i + 4
            if data[i + name_at : i + name_at + len(name)] != name:
                continue
            if flags is not None:
                struct.pack_into("<H", data, i + flag_at, flags)
            if method is not None:
                struct.pack_into("<H", data, i + flag_at + 2, method)
    path.write_bytes(bytes(data))


def test_a_member_compat_does_not_need_is_never_decompressed(tmp_path, monkeypatch):
    import zipfile

    path = tmp_path / "g.npz"  # plus an .npy of 64 MiB of zeros: it compresses to 64 kB
    _write(path, embeddings=np.eye(4, dtype=np.float32), labels=np.arange(4))
    with (
        zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as z,
        z.open("padding.npy", "w", force_zip64=True) as f,
    ):
        np.lib.format.write_array_header_1_0(
            f, {"descr": "|u1", "fortran_order": False, "shape": (64 << 20,)}
        )
        chunk = bytes(1 << 20)
        for _ in range(64):
            f.write(chunk)
    opened: list[str] = []
    real_open = zipfile.ZipFile.open

    def recording_open(self, name, *a, **k):
        opened.append(getattr(name, "filename", name))
        return real_open(self, name, *a, **k)

    monkeypatch.setattr(zipfile.ZipFile, "open", recording_open)
    b = load_bundle(path)
    assert len(b) == 4
    assert "padding.npy" not in opened and set(opened) == {"embeddings.npy", "labels.npy"}


def test_a_huge_extra_member_costs_no_memory(tmp_path):
    """The issue's case, measured: 1 GiB of zeros beside a small bundle (peak RSS, a fresh
    interpreter); it used to be decompressed whole."""
    import subprocess
    import sys
    import zipfile

    path = tmp_path / "g.npz"
    _write(path, embeddings=np.eye(4, dtype=np.float32), labels=np.arange(4))
    with (
        zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z,
        z.open("extra.npy", "w", force_zip64=True) as f,
    ):
        np.lib.format.write_array_header_1_0(
            f, {"descr": "|u1", "fortran_order": False, "shape": (1 << 30,)}
        )
        chunk = bytes(16 << 20)
        for _ in range(64):
            f.write(chunk)
    code = (
        "import resource, sys\n"
        "from compat.embeddings.bundle import load_bundle\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "load_bundle(sys.argv[1])\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert int(out.stdout) < 64 * 1024  # kB: under 64 MiB more, not the 1 GiB member


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"flags": 0x1}, "embeddings: the member is encrypted"),
        ({"method": 9}, "embeddings: compressed with deflate64 (zip method 9)"),
        ({"method": 98}, "embeddings: compressed with PPMd (zip method 98)"),
        ({"method": 14}, "embeddings: not a readable .npz member"),  # LZMA: garbage to it
    ],
    ids=["encrypted", "deflate64", "ppmd", "lzma-damaged"],
)
def test_members_compat_cannot_decompress_are_one_line_errors(tmp_path, patch, message):
    import zipfile

    path = tmp_path / "g.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for key, arr in (("embeddings", np.eye(4, dtype=np.float32)), ("labels", np.arange(4))):
            with z.open(f"{key}.npy", "w") as f:
                np.lib.format.write_array(f, arr)
    _patch_member(path, "embeddings.npy", **patch)
    with pytest.raises(BadInputError) as info:
        load_bundle(path)
    assert str(info.value).startswith(f"{path}: {message}")
    assert "\n" not in str(info.value)


def test_lzma_and_bzip2_members_zipfile_reads_are_read(tmp_path):
    import zipfile

    for method in (zipfile.ZIP_LZMA, zipfile.ZIP_BZIP2):
        path = tmp_path / f"g{method}.npz"
        with zipfile.ZipFile(path, "w", compression=method) as z:
            for key, arr in (("embeddings", np.eye(3, dtype=np.float32)), ("labels", np.arange(3))):
                with z.open(f"{key}.npy", "w") as f:
                    np.lib.format.write_array(f, arr)
        np.testing.assert_array_equal(load_bundle(path).embeddings, np.eye(3))
