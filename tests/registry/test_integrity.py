"""A registered model's files are fixed at registration: the sha256 of each (code included) is
in the version's tags, compat's loader refuses a copy that differs, and ``compat verify --model``
checks one for MLflow users (who run its code when they load it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_mlflow_model import promoted_tiny  # tests/registry is on sys.path (conftest)
from typer.testing import CliRunner

import compat.registry.assemble as A
from compat.cli.main import app
from compat.registry.integrity import FILES_TAG, ModelChanged
from compat.registry.store import Registry

runner = CliRunner()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, registry_template: Path) -> Path:
    """A project whose v1 (a tiny trained model) is registered and production, built once."""
    root = tmp_path_factory.mktemp("integrity") / "project"
    root.mkdir()
    promoted_tiny(root, registry_template)
    shutil.rmtree(root / "models")  # the loader must read the registry's copy
    return root


@pytest.fixture()
def project(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the built project (its store re-pointed at the copy's artifacts on first use)."""
    root = tmp_path / "project"
    shutil.copytree(built, root)
    monkeypatch.chdir(root)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return root


def stored(path: str) -> Path:
    """A file of v1's model folder in the artifact store."""
    (folder,) = Path("registry/artifacts").glob("*/artifacts/model")
    return folder / path


def load(reg: Registry) -> Path:
    """compat's own loader: v1's model folder from the registry (no local models/v1)."""
    return A.model_folder(reg, reg.get("v1"), Path("models"))


def verify(*args: str):
    return runner.invoke(app, ["verify", "--model", *args])


def test_registration_records_every_file_and_untampered_passes(project: Path):
    reg = Registry()
    tags = reg.get("v1").tags
    digests = json.loads(tags[FILES_TAG])
    assert {"MLmodel", "pyfunc_model.py", "card.json", "requirements.txt"} <= set(digests)
    assert "code/compat/models/version.py" in digests
    assert digests["weights.safetensors"] == tags["compat.weights_sha256"]
    assert (load(reg) / "pyfunc_model.py").is_file()

    r = verify("v1")
    assert r.exit_code == 0, r.output
    assert "ok  pyfunc_model.py" in r.stdout and "ok  weights.safetensors" in r.stdout
    assert f"{len(digests)} file(s) match the sha256 recorded at registration" in r.stdout
    assert "warning" not in r.output

    r = verify("@production", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["model"]["ok"] is True and report["model"]["recorded"] is True
    assert sorted(report["model"]["checked"]) == sorted(digests)
    assert report["error"] is None and report["drift"] is None  # only the model was checked
    # verify without --model keeps its object, with model: null
    r = runner.invoke(app, ["verify", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["model"] is None and json.loads(r.stdout)["drift"] is False
    # show prints how many digests, not the digests
    r = runner.invoke(app, ["show", "v1"])
    assert r.exit_code == 0 and f"{len(digests)} files" in r.stdout
    assert digests["MLmodel"] not in r.stdout


def test_code_appended_in_the_artifact_store_is_refused(project: Path, tmp_path: Path):
    marker = tmp_path / "ran"
    with stored("pyfunc_model.py").open("a") as f:
        f.write(f"\nopen({str(marker)!r}, 'w').write('ran')\n")
    reg = Registry()
    with pytest.raises(ModelChanged) as err:
        load(reg)
    assert err.value.exit_code == 4 and "pyfunc_model.py: sha256" in err.value.message

    r = verify("v1")
    assert r.exit_code == 4, r.output
    assert r.stderr.startswith("error: v1 (MLflow version 1): the model in the artifact store")
    assert "pyfunc_model.py" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = verify("v1", "--json")
    assert r.exit_code == 4
    report = json.loads(r.stdout)
    assert report["error"] == 4 and report["model"]["ok"] is False
    assert [c.split(":")[0] for c in report["model"]["changed"]] == ["pyfunc_model.py"]

    # What the check protects against: MLflow runs the stored code when it loads the model.
    import mlflow

    mlflow.set_registry_uri(reg.uri)
    mlflow.set_tracking_uri(reg.uri)
    mlflow.pyfunc.load_model("models:/compat@production")
    assert marker.read_text() == "ran"


@pytest.mark.parametrize(
    ("tamper", "named"),
    [
        ("weights", "weights.safetensors: sha256"),
        ("added", "code/torch.py: not recorded at registration"),
        ("removed", "card.json: missing"),
    ],
)
def test_other_changes_in_the_artifact_store_are_refused(project: Path, tamper: str, named: str):
    if tamper == "weights":
        blob = bytearray(stored("weights.safetensors").read_bytes())
        blob[-1] ^= 1
        stored("weights.safetensors").write_bytes(bytes(blob))
    elif tamper == "added":  # code/ is on sys.path when MLflow loads: this would shadow torch
        stored("code/torch.py").write_text("raise SystemExit('not torch')\n")
    else:
        stored("card.json").unlink()
    with pytest.raises(ModelChanged, match=named):
        load(Registry())
    r = verify("v1")
    assert r.exit_code == 4 and named in r.stderr, r.output


def test_a_version_registered_before_digests_is_not_recorded(project: Path):
    reg = Registry()
    rec = reg.get("v1")
    reg.client.delete_model_version_tag(reg.model, rec.mlflow_version, FILES_TAG)
    stored("pyfunc_model.py").write_text("# not checked: no digest was recorded\n")
    assert load(reg).is_dir()  # the loader accepts it: not an error

    r = verify("v1")
    assert r.exit_code == 0, r.output
    assert "warning: v1: the sha256 of its code files was not recorded" in r.stderr
    assert "ok  weights.safetensors" in r.stdout and "compat.weights_sha256" in r.stdout
    report = json.loads(verify("v1", "--json").stdout)
    assert report["model"]["recorded"] is False and report["model"]["checked"] == [
        "weights.safetensors"
    ]

    stored("weights.safetensors").write_bytes(b"other")  # its weights are still checked
    with pytest.raises(ModelChanged, match=r"weights\.safetensors: sha256"):
        load(reg)
    assert verify("v1").exit_code == 4


def test_verify_model_names_what_it_cannot_check(project: Path):
    r = verify("v9")
    assert r.exit_code == 3 and "'v9' is not registered" in r.stderr
    r = verify("@staging")
    assert r.exit_code == 2, r.output
    r = runner.invoke(app, ["verify", "--model", "v1", "--repair"])
    assert r.exit_code == 2, r.output
