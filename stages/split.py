"""DVC stage ``split``: training manifests per version and the evaluation set, validated.

Writes ``splits/<name>.json`` for every training set the scenarios in params.yaml ``split`` name,
``splits/eval.json``, and with ``split.validation`` ``splits/validation.json`` (classes disjoint
from both, for choices made before the evaluation set is looked at). The data expectations
(Great Expectations, docs/data-expectations.md) run before any split is written: the suite goes
to ``gx/expectations/split.json``, the validation result to
``gx/uncommitted/validations/split.json`` and its Data Docs to ``gx/uncommitted/data_docs/``,
also when an expectation fails; then the stage fails (exit 4) listing the failed expectations.
Usage: ``python stages/split.py [--params params.yaml] [--suite-only]``; ``--suite-only`` writes
the suite alone (no data read), to refresh the committed suite after the code changed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from compat.errors import BadInputError, CompatError
from compat.names import inside
from compat.params import PARAMS_FILE, PARAMS_SECTIONS, read_section
from compat.stage import run_stage


def main(argv: list[str] | None = None) -> int:
    """Run the stage; ``argv`` None (an in-process caller) means no arguments: the defaults."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default=PARAMS_FILE)
    parser.add_argument(
        "--suite-only", action="store_true", help="write gx/expectations/split.json and stop"
    )
    args = parser.parse_args([] if argv is None else argv)

    def body() -> int:
        from compat.data.expectations import (
            DOCS_FILE,
            OUTPUTS,
            DataValidationError,
            validate_split,
            write_validation,
        )
        from compat.data.sources import open_source
        from compat.data.split import SplitParams, build_split, build_validation, write_split

        # No split section: the defaults. An unknown section is an error, so a typo such as
        # `spilt:` cannot silently fall back to them.
        config = read_section(
            args.params, "split", SplitParams, default=SplitParams(), sections=PARAMS_SECTIONS
        )
        if args.suite_only:
            from compat.data.expectations import SUITE_FILE
            from compat.data.suite import build_suite, suite_text
            from compat.io import write_text

            try:
                path = inside(SUITE_FILE, ".")
            except ValueError as err:
                raise BadInputError(f"split: output {err}") from None
            write_text(path, suite_text(build_suite(config)))
            print(f"split: wrote {SUITE_FILE}")
            return 0
        source = open_source("data/source.json")
        manifests, eval_manifest = build_split(source, config)
        validation = build_validation(source, config)
        out = Path("splits")
        names = [*manifests, "eval", *(["validation"] if validation is not None else [])]
        # A symlinked splits/ or gx/ (or a file in them) must not lead outside.
        for path in [*(out / f"{name}.json" for name in names), *map(Path, OUTPUTS)]:
            try:
                inside(path, ".")
            except ValueError as err:
                raise BadInputError(f"split: output {err}") from None
        try:
            run = validate_split(source, config, manifests, eval_manifest, validation)
        except DataValidationError as err:
            if err.validation is not None:  # what failed, kept for a person to read
                write_validation(err.validation)
                raise DataValidationError(f"{err}\n  Data Docs: {DOCS_FILE}") from None
            raise
        write_validation(run)
        print(f"split: {len(run.result['results'])} data expectations met (Data Docs: {DOCS_FILE})")
        shutil.rmtree(out, ignore_errors=True)  # a renamed training set must not leave a stale file
        try:
            write_split(out, manifests, eval_manifest, validation)
        except CompatError:  # a full disk (exit 5): no split set half there
            shutil.rmtree(out, ignore_errors=True)
            raise
        for name, m in manifests.items():
            print(f"split: {name} ({m.scenario}): {len(m.items)} items, {len(m.classes)} classes")
        ev = eval_manifest
        print(
            f"split: eval: {len(ev.items)} items in {len(set(ev.labels))} classes, {len(ev.query)} queries "
            f"({len(ev.nonmated_classes)} non-mated classes), {len(ev.gallery)} gallery, {len(ev.pairs)} pairs"
        )
        if validation is not None:
            va = validation
            print(
                f"split: validation: {len(va.items)} items in {len(set(va.labels))} classes (disjoint "
                f"from training and eval), {len(va.query)} queries, {len(va.gallery)} gallery"
            )
        return 0

    return run_stage(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
