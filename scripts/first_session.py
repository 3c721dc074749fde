#!/usr/bin/env python3
"""The README's first session, recorded: the registry commands run on the default pipeline's
trained versions, their output kept as docs/first-session.txt.

    python scripts/first_session.py        # after dvc repro (needs models/, splits/, data/)

The commands run in a scratch copy of the project (params, contracts, the versions they name,
the splits, the rendered data and the embedding cache), so the project's own registry/ is never
touched, with output off a terminal (markdown rows, as CI sees them). The file is committed;
scripts/readme_numbers.py puts it in the README and checks every number of its verdict tables
against metrics/compat.json (the gate and the evaluate stage score the same embeddings with the
same bootstrap), so a session recorded on other weights than the committed metrics' fails
``--check`` until it is recorded again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "first-session.txt"


def _paragon() -> str:
    """v2's paragon as params.yaml names it (``evaluate.paragon``): the gate measures v2's update
    gain against it, so the session registers it."""
    from compat.params import load_params

    return load_params(ROOT / "params.yaml").evaluate.paragon["v2"]


PARAGON = _paragon()
VERSIONS = ("v1", "v2", PARAGON)
COMMANDS = (
    ["compat", "register", "v1"],
    ["compat", "register", "v2"],
    ["compat", "register", PARAGON],
    ["compat", "promote", "v1"],
    ["compat", "promote", "v2", "--against", "v1"],
    ["compat", "versions"],
)


def _copy(project: Path) -> None:
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copy2(ROOT / name, project / name)
    for name in ("contracts", "splits", "data"):
        shutil.copytree(ROOT / name, project / name)
    for version in VERSIONS:
        shutil.copytree(ROOT / "models" / version, project / "models" / version)
    if (ROOT / "cache" / "embeddings").is_dir():
        shutil.copytree(ROOT / "cache" / "embeddings", project / "cache" / "embeddings")


def record() -> str:
    compat = str(Path(sys.executable).with_name("compat"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "COMPAT_REGISTRY"))}
    env["COLUMNS"] = "100"
    lines = []
    with tempfile.TemporaryDirectory(prefix="compat-session-") as tmp:
        project = Path(tmp)
        _copy(project)
        for command in COMMANDS:
            r = subprocess.run([compat, *command[1:]], cwd=project, capture_output=True, text=True, env=env)  # fmt: skip
            if r.returncode != 0:
                raise SystemExit(f"error: {' '.join(command)} exited {r.returncode}: {r.stderr.strip()}")  # fmt: skip
            lines.append("$ " + " ".join(command))
            lines += [line.rstrip() for line in (r.stdout + r.stderr).strip().splitlines()]
    return "\n".join(lines) + "\n"


def main() -> int:
    missing = [v for v in VERSIONS if not (ROOT / "models" / v / "card.json").is_file()]
    if missing:
        print(f"error: models/{missing[0]}/card.json not found: run dvc repro first", file=sys.stderr)  # fmt: skip
        return 3
    from compat.io import atomic_path

    text = record()
    with atomic_path(OUT) as tmp:
        tmp.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
