"""Data expectations on a split, run with Great Expectations inside the ``split`` stage.

The suite (:mod:`compat.data.suite`, generated from the split params) is validated against the
split's long frame (:mod:`compat.data.rows`) in an ephemeral GX context (no files written by GX,
no network). What the split stage keeps of a run, written by :func:`write_validation` under the
pipeline's folder, all deterministic (equal splits give equal bytes, so DVC sees no change):

- ``gx/expectations/split.json``: the suite (committed; tests regenerate it and compare);
- ``gx/uncommitted/validations/split.json``: the validation result, without what GX lets change
  between identical runs (its batch load time), its results in the suite's order;
- ``gx/uncommitted/data_docs/index.html``: the result as Data Docs, readable offline, and
  ``expectations.html`` beside it, the suite (:mod:`compat.data.data_docs`).

A failed expectation raises ``DataValidationError`` (exit 4) listing each as
``[subject] description: N unexpected, e.g. [...]`` (``N missing``, ``observed ...``): the
expectation and the offending values or rows. An expectation that
cannot run is a bug in compat and raises ``RuntimeError`` instead. Importing this module does not
import great_expectations (about 3 s): :func:`validate_split` does.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat.data.sources import Source
from compat.data.split import EvalManifest, SplitParams, TrainManifest
from compat.errors import BadInputError
from compat.io import write_json, write_text

SUITE_FILE = "gx/expectations/split.json"
RESULT_FILE = "gx/uncommitted/validations/split.json"
DOCS_FILE = "gx/uncommitted/data_docs/index.html"  # the result; the suite's page beside it
UNCOMMITTED = "gx/uncommitted"
OUTPUTS = (SUITE_FILE, RESULT_FILE, DOCS_FILE)  # relative to a pipeline's folder
EXAMPLES = 3  # offending values a failure line shows (GX's partial_unexpected_count)


@dataclass
class Failure:
    """One failed expectation, in the words of its suite entry (``description`` starts with
    ``[subject]``)."""

    subject: str
    description: str
    unexpected: int | None
    examples: list[Any]
    observed: Any = None
    expected: Any = None
    missing: int | None = None

    def line(self) -> str:
        if self.unexpected is not None:
            count = f"{self.unexpected} unexpected"
        elif self.missing is not None:
            count = f"{self.missing} missing"
        else:
            count = f"observed {self.observed}"
            if self.expected is not None:
                count += f", expected {self.expected}"
        ex = f", e.g. {self.examples[:EXAMPLES]}" if self.examples else ""
        return f"{self.description}: {count}{ex}"


@dataclass
class Validation:
    """A validated split: the suite's JSON, the result (as written) and its failures."""

    suite: str
    result: dict
    failures: list[Failure] = field(default_factory=list)


class DataValidationError(BadInputError):
    """A split broke one or more data expectations (exit code 4). ``validation`` holds the run,
    so the stage can still write the result and its Data Docs."""

    def __init__(self, message: str, validation: Validation | None = None) -> None:
        super().__init__(message)
        self.validation = validation


def pool_classes(source: Source, params: SplitParams) -> int:
    """The training pool's class count, the suite parameter ``pool_classes``: the source's
    classes less the evaluation and validation ones, at most ``train_classes``
    (:func:`compat.data.split.build_split` draws every training set from that pool)."""
    n = len(Counter(item.label for item in source.items))
    held = params.eval.class_count(n) + (
        params.validation.class_count(n) if params.validation else 0
    )
    pool = n - held
    return pool if params.train_classes is None else min(pool, params.train_classes)


def _deterministic(result: dict, suite: dict) -> dict:
    """The result without what changes between identical runs (GX's batch load time and its
    ephemeral batch's names and ids), its results in the suite's order."""
    meta = result.get("meta", {})
    out = {k: v for k, v in result.items() if k not in ("meta", "id")}
    out["meta"] = {k: meta[k] for k in ("great_expectations_version",) if k in meta}
    order = {(e["type"], e.get("description")): k for k, e in enumerate(suite["expectations"])}

    def place(r: dict) -> int:
        config = r["expectation_config"]
        return order.get((config["type"], config.get("description")), len(order))

    for r in out.get("results", []):
        r["expectation_config"].pop("id", None)
    out["results"] = sorted(out.get("results", []), key=place)
    return out


def _exception(info: dict | None) -> str | None:
    """The message of an expectation that could not run, or None. A suite's results nest the
    exception info by metric; a single expectation's is flat."""
    info = info or {}
    for one in [info] if "raised_exception" in info else info.values():
        if isinstance(one, dict) and one.get("raised_exception"):
            return str(one.get("exception_message"))
    return None


def failures_of(result: dict) -> list[Failure]:
    """The failed expectations of a validation result; RuntimeError for one that could not run
    (a bug in compat, not a data failure)."""
    out = []
    for r in result["results"]:
        config = r["expectation_config"]
        subject = (config.get("meta") or {}).get("subject", "split")
        description = config.get("description") or config["type"]
        message = _exception(r.get("exception_info"))
        if message is not None:
            raise RuntimeError(f"expectation {description!r} on {subject} could not run: {message}")
        if r["success"]:
            continue
        res = r.get("result") or {}
        details = res.get("details") or {}
        expected = details.get("expected")
        if "partial_missing_list" in res:  # values expected among the column's, some absent
            count, examples = res["missing_count"], res.get("partial_missing_list")
            out.append(Failure(subject, description, None, list(examples or []), missing=count))
            continue
        out.append(
            Failure(
                subject,
                description,
                res.get("unexpected_count"),
                list(res.get("partial_unexpected_list") or []),
                res.get("observed_value"),
                f"{expected} of {details['of']}" if "of" in details else expected,
            )
        )
    return out


def run_suite(frame: Any, suite: Any, parameters: dict[str, Any] | None = None) -> dict:
    """Validate ``frame`` against ``suite`` in an ephemeral GX context; the result as JSON, made
    deterministic."""
    from compat.data.suite import context

    asset = context().data_sources.add_pandas("split").add_dataframe_asset(name="rows")
    batch = asset.add_batch_definition_whole_dataframe("all").get_batch(
        batch_parameters={"dataframe": frame}
    )
    result = batch.validate(
        suite,
        result_format={"result_format": "BASIC", "partial_unexpected_count": EXAMPLES},
        expectation_parameters=parameters or {},
    )
    # Through JSON text: numpy scalars become the numbers a reader of the file sees.
    return _deterministic(json.loads(json.dumps(result.to_json_dict())), suite.to_json_dict())


def validate_split(
    source: Source,
    params: SplitParams,
    manifests: dict[str, TrainManifest],
    ev: EvalManifest,
    validation: EvalManifest | None = None,
) -> Validation:
    """Validate a split (the validation set too, when it has one) against the suite its params
    generate; raise DataValidationError listing every failed expectation."""
    from compat.data.rows import split_rows
    from compat.data.suite import POOL, build_suite, suite_text

    suite = build_suite(params)
    frame = split_rows(source, manifests, ev, validation)
    result = run_suite(frame, suite, {POOL: pool_classes(source, params)})
    run = Validation(suite_text(suite), result, failures_of(result))
    if run.failures:
        lines = "\n  ".join(f.line() for f in run.failures)
        raise DataValidationError(
            f"split failed {len(run.failures)} data expectation(s):\n  {lines}", run
        )
    return run


def write_validation(run: Validation, folder: str | Path = ".") -> None:
    """Write the suite, the result and its Data Docs (the result's page and the suite's) under
    ``folder``, a pipeline's folder."""
    from compat.data.data_docs import SUITE_PAGE, render_result, render_suite

    root = Path(folder)
    write_text(root / SUITE_FILE, run.suite)
    shutil.rmtree(root / UNCOMMITTED, ignore_errors=True)  # no page of an earlier run stays
    write_json(root / RESULT_FILE, run.result)
    docs = root / DOCS_FILE
    write_text(docs, render_result(run.result))
    write_text(docs.with_name(SUITE_PAGE), render_suite(json.loads(run.suite)))
