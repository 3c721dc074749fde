"""compat: upgrade embedding models without re-embedding the gallery.

Importing the package turns off MLflow's telemetry before anything can import mlflow, so
nothing phones home whichever entry point (CLI, DVC stage, notebook) loads compat first, and
sets OpenMP's defaults (:mod:`compat.cpu`) before torch or faiss can load it.
"""

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "1")

# Before torch or faiss can load OpenMP, which reads these once: a process limited to fewer
# cores than the machine's (or told COMPAT_THREADS) sizes its pools to them, and idle threads
# wait as measured best for the CPU (compat/cpu.py; docs/findings.md, "Training beside other
# work").
from compat.cpu import environment_defaults

environment_defaults()

__version__ = "0.1.0"
