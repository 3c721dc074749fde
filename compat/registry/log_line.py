"""One line of the promotion log, typed: :class:`LogLine`, what both storages of the log hold
(``registry/promotions.jsonl`` for the embedded registry, the ``compat_promotions`` table of a
shared one: :mod:`compat.registry.promotions`, :mod:`compat.registry.shared`).

Every line is parsed through this one model when it is read back and validated before it is
written, so a reader never meets a list where an id belongs, a number where a digest belongs or
a state no writer writes; a line that does not parse is :class:`~compat.errors.BadInputError`
(exit 4) naming the file and line (or the table and row), the field and what is wrong.

A writer that records a new field adds it here first: an unknown key is an error, so a field no
reader knows is never written. Three kinds of line share the model (a promotion's lines close
what its first opened, a compare-and-set logged before and after the alias moves:
docs/design.md, Registry conventions):

* a promotion or rollback opens ``pending`` (``who``, ``to``, ``from``, ``against``, the contract
  and report digests, the registry, the MLflow version, the gallery it gated, a rollback's
  accepted losses);
* a closing line names the same ``id`` with ``committed`` or ``aborted`` (``recovered``: the next
  promotion resolved it after a crash);
* ``compat unregister`` writes one whole line (kind ``unregister``, state ``unregistered``: the
  version, its MLflow version, weights, run and why).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from compat.errors import BadInputError

STATES = ("pending", "committed", "aborted", "unregistered")
CLOSING = ("committed", "aborted")
ONE_LINE_KINDS = ("unregister",)  # a record complete in one line; every other opens and closes


class LogLine(BaseModel):
    """One line of the promotion log (module docstring). Unknown keys, and values of the wrong
    type (no number for a string, no string for a flag), are errors."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

    id: str | None = Field(None, min_length=1)
    state: Literal["pending", "committed", "aborted", "unregistered"] | None = None
    when: str | None = None
    who: str | None = None
    kind: Literal["promotion", "rollback", "unregister"] | None = None
    from_: str | None = Field(None, alias="from")
    to: str | None = None
    against: str | None = None
    contract_sha256: str | None = None
    report_sha256: str | None = None
    registry: str | None = None
    mlflow_version: str | None = None
    recovered: bool | None = None
    gallery: dict[str, Any] | None = None  # compat.registry.gallery.GalleryRecord reads it
    accepted_loss: dict[str, Any] | None = None  # a rollback's losses accepted: who, why, checks
    version: str | None = None  # an unregister line's version ...
    weights_sha256: str | None = None
    run_id: str | None = None
    why: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> LogLine:
        """What each line must carry for the log to be read back (replay, drift, compat log):
        every line its ``id`` and ``state``; an opening line its time, who and target."""
        need = ["id", "state"]
        if self.kind in ONE_LINE_KINDS:
            need += ["when", "who", "version"]
            if self.state not in (None, "unregistered"):
                raise ValueError(
                    f"an {self.kind} line's state is 'unregistered', not {self.state!r}"
                )
        elif self.state == "pending":
            need += ["when", "who", "to"]
        elif self.state == "unregistered":
            raise ValueError("state 'unregistered' belongs to an unregister line (kind unregister)")
        missing = [k for k in need if not getattr(self, k)]
        if missing:
            raise ValueError(f"a promotion record without {', '.join(map(repr, missing))}")
        return self

    @property
    def opens(self) -> bool:
        """Whether this line starts a record (a ``pending`` promotion, a one-line record)."""
        return self.state == "pending" or self.kind in ONE_LINE_KINDS

    def as_json(self) -> dict[str, Any]:
        """The line as written: JSON keys (``from``), the keys it has and no others."""
        return self.model_dump(by_alias=True, exclude_unset=True)


def parse_line(raw: Any, where: str) -> LogLine:
    """``raw`` (a decoded JSON value) as a :class:`LogLine`; BadInputError (exit 4) naming
    ``where`` (``<file>:<line>``, ``<table> row <n>``), the field and the problem otherwise."""
    from compat.config import format_validation_error

    if not isinstance(raw, dict):
        raise BadInputError(f"{where}: not a JSON object (a promotion log record)")
    try:
        return LogLine.model_validate(raw)
    except ValidationError as err:
        message = format_validation_error(where, err, raw)
        # one line whatever a key holds (a hand-made line may name a key "\n")
        raise BadInputError(message.replace("\r", "\\r").replace("\n", "\\n")) from None


def new_line(where: str, **fields: Any) -> LogLine:
    """A line about to be written, validated as a reader will read it (a writer that would
    write a malformed line is stopped before anything is written)."""
    return parse_line(fields, where)


__all__ = ["CLOSING", "ONE_LINE_KINDS", "STATES", "LogLine", "new_line", "parse_line"]
