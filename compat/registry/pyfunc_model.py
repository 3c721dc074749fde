"""The models-from-code file of a registered compat version (MLflow "models from code").

MLflow copies this file into every registered version's model folder and runs it to load the
version, so ``mlflow.pyfunc.load_model("models:/compat@production")`` returns an embedder
without unpickling anything: the weights are ``weights.safetensors`` beside ``card.json`` in
the model folder (the pyfunc artifacts ``weights`` and ``card``), checked against the card's
sha256 and loaded by :func:`compat.models.version.load_version`.

``predict(images)`` takes uint8 images (n, H, W, C), as the version's input schema declares,
and returns float32 (n, dim) L2-normalised embeddings computed exactly as compat's own
:func:`compat.embeddings.embed.embed_images` computes them. The folder also carries compat's
code (``code/compat``), so the version loads where compat is not installed (torch,
safetensors, numpy and pydantic must be; see its ``requirements.txt``).

Only MLflow should import this file: importing it registers the model with
``mlflow.models.set_model``.
"""

from pathlib import Path

import mlflow
import numpy as np
from mlflow.pyfunc import PythonModel


class CompatEmbedder(PythonModel):
    """A compat version as an MLflow pyfunc: uint8 images in, L2-normalised embeddings out."""

    def load_context(self, context) -> None:
        from compat.models.version import load_version

        folder = Path(context.artifacts["weights"]).parent
        self.model, self.card = load_version(folder)

    # ``np.ndarray`` is a hint MLflow takes as is: the signature below declares the schema.
    def predict(self, context, model_input: np.ndarray, params=None) -> np.ndarray:
        from compat.embeddings.embed import embed_images

        # The schema names its one tensor ``images``: MLflow hands it over as {"images": array}.
        if isinstance(model_input, dict):
            model_input = model_input["images"]
        return embed_images(self.model, np.asarray(model_input))


mlflow.models.set_model(CompatEmbedder())
