"""A registered model's files, fixed at registration: the sha256 of every one, code included.

A trained version's ``model/`` folder is an MLflow model saved *from code*
(:mod:`compat.registry.mlflow_model`): ``mlflow.pyfunc.load_model("models:/compat@production")``
executes ``pyfunc_model.py`` and imports the compat copy under ``code/``, both read from the
artifact store. Whoever can write the artifact store can therefore run code on every host that
loads the model. At registration the sha256 of each file of the folder (code, ``MLmodel``, the
environment files, card, weights) is recorded in the version's tag ``compat.files_sha256`` (one
JSON object, relative path -> digest), which lives in the registry's database, not in the
artifact store. :func:`compare` checks a downloaded copy against it: a file changed, missing or
added is named. compat's own loader (:func:`compat.registry.assemble.model_folder`) refuses such
a copy (:class:`ModelChanged`, exit 4); ``compat verify --model VERSION`` checks one for MLflow
users before they load it (:func:`verify_model`).

A version registered before the tag existed has only ``compat.weights_sha256``: its weights are
checked and its other files are reported as not recorded, which is not an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat.errors import BadInputError, NotFoundError, UsageError
from compat.io import sha256_file
from compat.registry.artifacts import download, is_model
from compat.registry.store import PRODUCTION, Registry, VersionRecord

FILES_TAG = "compat.files_sha256"
WEIGHTS_TAG = "compat.weights_sha256"
WEIGHTS_FILE = "weights.safetensors"


class ModelChanged(BadInputError):
    """A registered model's files in the artifact store differ from those recorded at
    registration; ``result`` is the :class:`ModelCheck` as JSON."""

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class ModelCheck:
    """What :func:`compare` found: the files checked and, per file that differs, why."""

    version: str
    mlflow_version: str
    recorded: bool  # False: registered before compat recorded its files' digests
    checked: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # one "path: why" per differing file
    warning: str | None = None

    @property
    def ok(self) -> bool:
        return not self.changed

    def message(self) -> str:
        """One line naming the first differing file (and how many more)."""
        if self.ok:
            return f"{self.version}: {len(self.checked)} file(s) match what was registered"
        more = self.changed[1:]
        rest = (
            f" (and {len(more)} more: {', '.join(c.split(':')[0] for c in more)})" if more else ""
        )
        return (
            f"{self.version} (MLflow version {self.mlflow_version}): the model in the artifact "
            f"store is not the one registered: {self.changed[0]}{rest}; do not load it (MLflow "
            "runs a model's code when it loads it)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "mlflow_version": int(self.mlflow_version),
            "recorded": self.recorded,
            "checked": self.checked,
            "changed": self.changed,
            "ok": self.ok,
            "warning": self.warning,
        }


def folder_digests(folder: Path) -> dict[str, str]:
    """The sha256 of every file under ``folder``, by its path relative to it (``/``-separated)."""
    return {
        p.relative_to(folder).as_posix(): sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def files_tag(digests: dict[str, str]) -> str:
    """The value of the ``compat.files_sha256`` tag: compact JSON, sorted by path."""
    return json.dumps(digests, sort_keys=True, separators=(",", ":"))


def recorded_digests(rec: VersionRecord) -> dict[str, str] | None:
    """The digests recorded at registration; None for a version registered before they were."""
    raw = rec.tags.get(FILES_TAG)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise BadInputError(f"{rec.name}: tag {FILES_TAG}: not a JSON object of sha256 digests")
    return value


def recorded_summary(rec: VersionRecord) -> str:
    """What ``compat show`` prints for the tag: how many digests it holds, not the digests."""
    try:
        digests = recorded_digests(rec)
    except BadInputError as err:
        return err.message
    return "not recorded" if digests is None else f"{len(digests)} files (compat verify --model)"


def _short(digest: str) -> str:
    return f"{digest[:12]}..."


def compare(rec: VersionRecord, folder: Path) -> ModelCheck:
    """Compare a downloaded copy of ``rec``'s model folder with the digests of its tags."""
    recorded = recorded_digests(rec)
    found = folder_digests(folder)
    check = ModelCheck(rec.name, rec.mlflow_version, recorded=recorded is not None)
    if recorded is None:
        expected = {WEIGHTS_FILE: rec.tags.get(WEIGHTS_TAG, "")}
        check.warning = (
            f"{rec.name}: the sha256 of its code files was not recorded (registered before "
            f"compat recorded them): only {WEIGHTS_FILE} was checked ({WEIGHTS_TAG})"
        )
    else:
        expected = recorded
        for path in sorted(set(found) - set(recorded)):
            check.changed.append(f"{path}: not recorded at registration (added since)")
    for path, digest in sorted(expected.items()):
        check.checked.append(path)
        if path not in found:
            check.changed.append(f"{path}: missing (recorded at registration)")
        elif found[path] != digest:
            check.changed.append(
                f"{path}: sha256 {_short(found[path])} but {_short(digest)} was recorded at "
                "registration"
            )
    return check


def check_model(rec: VersionRecord, folder: Path) -> ModelCheck:
    """:func:`compare`, raising :class:`ModelChanged` (exit 4) if any file differs."""
    check = compare(rec, folder)
    if not check.ok:
        raise ModelChanged(check.message(), check.to_json())
    return check


def resolve(reg: Registry, name: str) -> VersionRecord:
    """A registered version by name, or ``@production``: the version the alias points at."""
    if name == f"@{PRODUCTION}":
        current = reg.production()
        if current is None:
            raise NotFoundError(f"{PRODUCTION} is unset in {reg.safe_uri}: no model to check")
        name = current
    elif name.startswith("@"):
        raise UsageError(f"{name}: the only alias compat knows is @{PRODUCTION}")
    return reg.get(name)


def verify_model(reg: Registry, name: str) -> ModelCheck:
    """Download version ``name``'s model (as MLflow would load it) and compare every recorded
    digest; :class:`ModelChanged` (exit 4) names the first file that differs."""
    rec = resolve(reg, name)
    if not is_model(rec):
        raise UsageError(
            f"{rec.name} was registered from embeddings: it has no model to load or check"
        )
    return check_model(rec, download(reg, rec, "model"))


__all__ = [
    "FILES_TAG",
    "ModelChanged",
    "ModelCheck",
    "check_model",
    "compare",
    "files_tag",
    "folder_digests",
    "recorded_digests",
    "recorded_summary",
    "resolve",
    "verify_model",
]
