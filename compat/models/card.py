"""The cards beside a version's weights: what the weights are, where they came from, their digest.

``models/<version>/card.json`` is a :class:`ModelCard`; ``models/<version>/upgrade/card.json``
(psi, the upgrade module into ``<version>``) is an :class:`UpgradeCard`. Each has one reader
(``read``) and one writer (``write``), and this module is the only place that knows their JSON
keys. The writers keep the byte format the pipeline has always written (sorted keys, indent 2,
a final newline, fields never set left out rather than written as null), because DVC hashes the
cards and a re-run must reproduce them byte for byte.

Only the fields that loading the weights needs are required; the rest is provenance, optional
because hand-made and benchmark cards carry less of it. An unknown field is an error: a typo in a
card must not pass as provenance.

:func:`check_joined` is the one check of a fitted map against the versions it is served
between (the versions it should connect, the weights those versions were made by), for psi and
every :mod:`compat.maps` map; :func:`check_upgrade` is it for a psi card, with the width of the
rows psi will be given. The gate, ``compat score --query-adapter``, the MLflow model, evaluate
and backfill all reach it through :meth:`compat.maps.SpaceMap.check_serves`. :func:`check_paragon` is the one
check that a version's paragon was trained on the version's own training split; evaluate and
promote call it.

No torch here: the registry and the CLI read cards without loading a model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from compat.errors import BadInputError, NotFoundError
from compat.io import write_json

CARD = "card.json"
CARD_SCHEMA = 1
UPGRADE_KIND = "upgrade"


class _Card(BaseModel):
    """Shared reading and writing; the subclasses declare the fields."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    what: ClassVar[str] = "card"

    @classmethod
    def card_path(cls, path: str | Path) -> Path:
        """``path`` is the folder holding ``card.json`` or the card file itself."""
        p = Path(path)
        return p if p.suffix == ".json" and not p.is_dir() else p / CARD

    @classmethod
    def from_json(cls, data: Any, where: str | Path) -> Any:
        """Validate a parsed card; BadInputError names ``where`` and the first bad field."""
        if not isinstance(data, dict):
            raise BadInputError(f"{where}: a {cls.what} must be a JSON object")
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise BadInputError(f"{where}: {_first_problem(err)}") from None

    @classmethod
    def read(cls, path: str | Path) -> Any:
        """The card in ``path`` (folder or file); NotFoundError if absent, BadInputError if bad."""
        card_path = cls.card_path(path)
        if not card_path.is_file():
            raise NotFoundError(f"{card_path}: {cls.what} not found")
        try:
            data = json.loads(card_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise BadInputError(f"{card_path}: not valid JSON: {err.msg}") from None
        except UnicodeDecodeError:
            raise BadInputError(f"{card_path}: not UTF-8 text") from None
        return cls.from_json(data, card_path)

    def to_json(self) -> dict[str, Any]:
        """The card as the JSON object on disk (JSON keys; fields never set are left out)."""
        # Python mode: JSON mode would turn a NaN metric into null and change the bytes.
        return self.model_dump(by_alias=True, exclude_unset=True)

    def write(self, path: str | Path) -> Path:
        """Write the card atomically into ``path`` (folder or file); returns the file written."""
        card_path = self.card_path(path)
        write_json(card_path, self.to_json())
        return card_path

    def updated(self, **fields: Any) -> Any:
        """A validated copy with ``fields`` set (JSON names or field names)."""
        return type(self).model_validate({**self.to_json(), **fields})


def _first_problem(err: ValidationError) -> str:
    e = err.errors()[0]
    field = ".".join(str(p) for p in e["loc"]) or "card"
    if e["type"] == "missing":
        return f"{field}: missing field"
    if e["type"] == "extra_forbidden":
        return f"{field}: unknown field"
    return f"{field}: {e['msg']}"


class DataRecord(BaseModel):
    """The training data of a version, grouped (the registry's ``compat.data`` tag reads it)."""

    model_config = ConfigDict(extra="forbid")

    split: str | None = None
    train_fingerprint: str | None = None
    source_fingerprint: str | None = None


class ModelCard(_Card):
    """``models/<version>/card.json``: architecture, head, method, parent, data and digest."""

    what: ClassVar[str] = "model card"

    # what loading the weights needs
    backbone: str
    dim: int
    in_channels: int
    image_size: int
    pooling: str
    weights_sha256: str
    # cards written before the option existed hold the default neck
    neck: str = "linear-bn"
    # the head the version was trained with (its rows ride along in the weights file)
    head: str | None = None
    head_params: dict[str, Any] | None = None
    num_classes: int | None = None
    classes: list[str] | None = None
    # how it was trained and against what
    version: str | None = None
    card_schema: int | None = Field(None, alias="schema")
    transform: str | None = None
    method: str | None = None
    method_params: dict[str, Any] | None = None
    parent: str | None = None
    parent_weights_sha256: str | None = None
    init: dict[str, Any] | None = None
    split: str | None = None
    data_fingerprint: str | None = None
    source_fingerprint: str | None = None
    data: DataRecord | None = None
    num_images: int | None = None
    epochs: int | None = None
    steps: int | None = None
    seed: int | None = None
    effective_seed: int | None = None
    training_seconds: float | None = None
    wall_seconds: float | None = None
    device: str | None = None
    world_size: int | None = None
    config: dict[str, Any] | None = None
    packages: dict[str, str] | None = None
    created_at: str | None = None

    @property
    def class_names(self) -> list[str]:
        """The head's class order ([] when the card names none)."""
        return list(self.classes or [])

    def named(self, version: str | None) -> ModelCard:
        """This card with ``version`` filled in when the card itself does not name one."""
        if self.version is not None or version is None:
            return self
        return self.model_copy(update={"version": version})


class UpgradeRefusal(BaseModel):
    """Why the upgrade stage refused the psi it fitted: on held-out pairs, the new version's
    queries retrieved worse from psi(old gallery) than from the old gallery left alone."""

    model_config = ConfigDict(extra="forbid")

    reason: str
    metric: str  # the held-out retrieval metric compared, e.g. "top1"
    psi: float | None = None  # its value with the gallery upgraded by the fitted psi
    backward: float | None = None  # with the old gallery as it is (None: nothing held out)


class UpgradeCard(_Card):
    """``models/<version>/upgrade/card.json``: psi's shape, the two versions it connects, the
    weights both were at when it was fitted, its data and its own digest.

    ``refused`` set: the fitted psi made held-out retrieval worse than no upgrade, so the
    weights beside the card are the identity (a residual psi whose branch is zero): applying
    them leaves rows as they are. Readers that can skip the work say "no upgrade" instead
    (:attr:`is_refused`)."""

    what: ClassVar[str] = "upgrade module card"

    kind: Literal["upgrade"]
    from_: str = Field(alias="from")
    to: str
    in_dim: int = Field(ge=1)
    out_dim: int = Field(ge=1)
    hidden: int = Field(ge=1)
    blocks: int = Field(ge=1)
    weights_sha256: str
    residual: bool | None = None  # psi(x) = x + MLP(x); absent (older cards): the plain MLP
    refused: UpgradeRefusal | None = None
    card_schema: int | None = Field(None, alias="schema")
    from_weights_sha256: str | None = None
    to_weights_sha256: str | None = None
    loss: str | None = None
    split: str | None = None
    data_fingerprint: str | None = None
    source_fingerprint: str | None = None
    pairs_fingerprint: str | None = None
    transform: str | None = None
    num_pairs: int | None = None
    seed: int | None = None
    effective_seed: int | None = None
    config: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    training_seconds: float | None = None
    device: str | None = None
    packages: dict[str, str] | None = None
    created_at: str | None = None

    @classmethod
    def from_json(cls, data: Any, where: str | Path) -> UpgradeCard:
        # Say "not an upgrade module card" before listing fields: a model card put where psi
        # belongs is the likely mistake, and its missing fields would bury that.
        if not isinstance(data, dict) or data.get("kind") != UPGRADE_KIND:
            raise BadInputError(f"{where}: kind: not an upgrade module card")
        return super().from_json(data, where)

    @property
    def is_refused(self) -> bool:
        """True when the upgrade stage refused its fit and saved the identity instead."""
        return self.refused is not None

    def provenance(self, folder: str | Path) -> dict[str, Any]:
        """What evaluate and promote reports record about the psi they used."""
        out = {"path": str(folder), "weights_sha256": self.weights_sha256, "from": self.from_}
        if self.refused is not None:
            out["refused"] = self.refused.reason
        return out


class EmbeddingsCard(_Card):
    """The card of a version registered from its embeddings of the evaluation set (a team that
    trains elsewhere): the facts its contract declares and the bundle's digest."""

    what: ClassVar[str] = "embeddings card"

    version: str
    dim: int
    weights_sha256: str  # of the embeddings bundle: the registry's identity of the version
    head: str | None = None
    parent: str | None = None
    method: str | None = None
    source: str | None = None
    data: dict[str, Any] | None = None


def read_model_card(path: str | Path) -> ModelCard:
    """The model card of a version folder (or the card file itself)."""
    return ModelCard.read(path)


def write_model_card(path: str | Path, card: ModelCard) -> Path:
    """Write a model card atomically into a version folder (or onto a card file)."""
    return card.write(path)


def read_upgrade_card(path: str | Path) -> UpgradeCard:
    """The card of an upgrade folder (or the card file itself)."""
    return UpgradeCard.read(path)


def write_upgrade_card(path: str | Path, card: UpgradeCard) -> Path:
    """Write an upgrade card atomically into an upgrade folder (or onto a card file)."""
    return card.write(path)


@dataclass(frozen=True)
class Joins:
    """What a caller needs a map to join: the versions and the weights they were at
    (:func:`check_joined`; each fact left None is not checked). ``wanted`` says in an error what the caller asked for, ``weights_origin`` where
    its digests come from, ``rerun`` the fix for stale weights."""

    source: str | None = None
    target: str | None = None
    wanted: str | None = None
    from_weights: str | None = None
    to_weights: str | None = None
    weights_origin: str = "the weights at hand are"
    rerun: str | None = None


def check_joined(
    where: str | Path,
    fitted: tuple[str, str],
    fitted_weights: tuple[str | None, str | None],
    *,
    subject: str = "psi",
    verb: str = "upgrades",
    source: str | None = None,
    target: str | None = None,
    wanted: str | None = None,
    from_weights: str | None = None,
    to_weights: str | None = None,
    weights_origin: str = "the weights at hand are",
    rerun: str | None = None,
) -> None:
    """The one check of a fitted map against the versions it is served between, for psi
    (:func:`check_upgrade`) and every :mod:`compat.maps` map alike (its card's ``from``/``to``
    and the weights digests of the rows it was fitted on): BadInputError (exit 4) unless
    ``fitted`` (from, to) is ``source`` -> ``target`` and ``fitted_weights`` are the
    ``from_weights`` / ``to_weights`` digests.

    Every fact left None is not checked, and a digest the card does not record is not compared.
    ``subject`` and ``verb`` name the map in messages ("psi upgrades", "the map joins"),
    ``wanted`` what the caller asked for (default ``not <source> -> <target>``),
    ``weights_origin`` where its digests come from (it precedes the digest) and ``rerun`` the fix
    for stale weights. Messages name the card file, the field and both values.
    """
    fitted_from, fitted_to = fitted
    if (target is not None and fitted_to != target) or (
        source is not None and fitted_from != source
    ):
        asked = wanted or f"not {source or fitted_from} -> {target or fitted_to}"
        raise BadInputError(
            f"{where}: from/to: {subject} {verb} {fitted_from} -> {fitted_to}, {asked}"
        )
    for role, version, have, fit in (
        ("from", fitted_from, from_weights, fitted_weights[0]),
        ("to", fitted_to, to_weights, fitted_weights[1]),
    ):
        if have and fit and have != fit:
            raise BadInputError(
                f"{where}: {role}_weights_sha256: {subject} was fitted on {version} weights "
                f"{fit[:12]}..., but {weights_origin} {have[:12]}...; "
                f"{rerun or f're-run upgrade@{fitted_to}'}"
            )


def check_upgrade(
    card: UpgradeCard,
    where: str | Path,
    *,
    target: str,
    source: str | None = None,
    wanted: str | None = None,
    from_weights: str | None = None,
    to_weights: str | None = None,
    weights_origin: str = "the weights at hand are",
    in_dim: int | None = None,
    rows_of: str = "the rows",
    rerun: str | None = None,
) -> None:
    """Raise BadInputError unless psi (``card``) upgrades ``source`` -> ``target``, was fitted on
    the ``from_weights`` / ``to_weights`` digests (:func:`check_joined`, cards of hand-made psi
    carry none) and takes ``in_dim``-wide rows (``rows_of`` names them)."""
    check_joined(
        where, (card.from_, card.to), (card.from_weights_sha256, card.to_weights_sha256),
        source=source, target=target, wanted=wanted, from_weights=from_weights,
        to_weights=to_weights, weights_origin=weights_origin, rerun=rerun,
    )  # fmt: skip
    if in_dim is not None and card.in_dim != in_dim:
        raise BadInputError(
            f"{where}: in_dim: psi takes {card.in_dim}-dim rows, {rows_of} have {in_dim}"
        )


def train_fingerprint(card: ModelCard) -> str | None:
    """The fingerprint of the training split ``card``'s weights were trained on (None when the
    card records none: hand-made and benchmark cards)."""
    recorded = card.data.train_fingerprint if card.data is not None else None
    return recorded or card.data_fingerprint


def dim_mismatch(card: ModelCard) -> str | None:
    """How the version's embeddings meet an older version's of another width (``truncate``
    or ``pad``, :mod:`compat.embeddings.dims`): the ``dim_mismatch`` its training method was
    given (``method_params``); None when the method has no such parameter."""
    value = (card.method_params or {}).get("dim_mismatch")
    return str(value) if value is not None else None


def check_paragon(
    version: str,
    paragon: str,
    *,
    version_data: str | None,
    paragon_data: str | None,
    where: str,
) -> None:
    """Raise BadInputError unless ``paragon`` was trained on ``version``'s own training split.

    The update gain (BCT, Shen et al. CVPR 2020, Eq. 9) divides by what a full backfill to the
    new model would buy, M(new*, new*) - M(old, old), where new* is trained *on the new model's
    training data* without compatibility; a paragon trained on more data (a later version's
    split) inflates the denominator and understates the gain. ``version_data`` and
    ``paragon_data`` are training-split fingerprints (a model card's ``data.train_fingerprint``,
    the registry's ``compat.data`` tag); a side that records none (a version registered from
    its embeddings) is not compared. ``where`` names what is being checked (file or field).
    """
    if version_data and paragon_data and version_data != paragon_data:
        raise BadInputError(
            f"{where}: paragon {paragon} was trained on split {paragon_data[:12]}..., but "
            f"{version} on {version_data[:12]}...; a version's paragon is an independent model "
            f"trained on that version's own training split"
        )


__all__ = [
    "CARD",
    "CARD_SCHEMA",
    "DataRecord",
    "EmbeddingsCard",
    "Joins",
    "ModelCard",
    "UpgradeCard",
    "UpgradeRefusal",
    "check_joined",
    "check_paragon",
    "check_upgrade",
    "dim_mismatch",
    "read_model_card",
    "read_upgrade_card",
    "train_fingerprint",
    "write_model_card",
    "write_upgrade_card",
]
