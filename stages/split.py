"""DVC stage ``split``: training manifests per version and the evaluation set, validated.

Writes ``splits/<name>.json`` for every training set the scenarios in params.yaml ``split`` name,
``splits/eval.json``, and with ``split.validation`` ``splits/validation.json`` (classes disjoint
from both, for choices made before the evaluation set is looked at). Data expectations (Great Expectations) run before anything is written;
a violation fails the stage with the list of failed expectations.
Usage: ``python stages/split.py [--params params.yaml]``.
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
    args = parser.parse_args([] if argv is None else argv)

    def body() -> int:
        from compat.data.expectations import validate_split
        from compat.data.sources import open_source
        from compat.data.split import SplitParams, build_split, build_validation, write_split

        # No split section: the defaults. An unknown section is an error, so a typo such as
        # `spilt:` cannot silently fall back to them.
        config = read_section(
            args.params, "split", SplitParams, default=SplitParams(), sections=PARAMS_SECTIONS
        )
        source = open_source("data/source.json")
        manifests, eval_manifest = build_split(source, config)
        validation = build_validation(source, config)
        validate_split(source, config, manifests, eval_manifest, validation)
        out = Path("splits")
        names = [*manifests, "eval", *(["validation"] if validation is not None else [])]
        for name in names:  # a symlinked splits/ or splits/<name>.json must not lead outside
            try:
                inside(out / f"{name}.json", ".")
            except ValueError as err:
                raise BadInputError(f"split: output {err}") from None
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
