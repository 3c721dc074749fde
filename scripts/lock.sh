#!/usr/bin/env bash
# Refresh the lock files the README's two commands and .ci/run install from:
#   requirements/base.txt   every package `pip install -e .` needs (README command 1)
#   requirements/dev.txt    every package `pip install -e '.[dev]'` needs (command 2, CI)
# pyproject.toml keeps the loose ranges for people who install compat into their own
# environment; the lock files pin what the tests ran with. pip-tools, not uv: pip-compile
# resolves with pip, so it honours this machine's pip configuration (torch capped at what its
# disk holds); uv would resolve a CUDA torch of several GB from the index instead.
# After refreshing, run the test suite on the refreshed lock before it lands:
#   python3 -m venv /tmp/lockcheck && . /tmp/lockcheck/bin/activate &&
#   pip install -e '.[dev]' -c requirements/dev.txt && pytest
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q 'pip-tools>=7.4'
common=(--quiet --strip-extras --no-emit-index-url --no-emit-find-links --unsafe-package compat
        --no-emit-trusted-host --newline LF)
pip-compile "${common[@]}" --output-file requirements/base.txt pyproject.toml
pip-compile "${common[@]}" --extra dev --output-file requirements/dev.txt pyproject.toml
