"""compat: upgrade embedding models without re-embedding the gallery.

Importing the package turns off MLflow's telemetry before anything can import mlflow, so
nothing phones home whichever entry point (CLI, DVC stage, notebook) loads compat first.
"""

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "1")

__version__ = "0.1.0"
