"""The models-from-code file of a registered compat version (MLflow "models from code").

MLflow copies this file into every registered version's model folder and runs it to load the
version, so ``mlflow.pyfunc.load_model("models:/compat@production")`` returns an embedder
without unpickling anything: the weights are ``weights.safetensors`` beside ``card.json`` in
the model folder (the pyfunc artifacts ``weights`` and ``card``), checked against the card's
sha256 and loaded by :func:`compat.models.version.load_version`.

``predict(images)`` takes uint8 images (n, H, W, C), as the version's input schema declares,
and returns float32 (n, dim) L2-normalised embeddings computed exactly as compat's own
:func:`compat.embeddings.embed.embed_images` computes them. A version served through a query
adapter (its ``adapter/`` folder) returns them mapped into the old space by that adapter
(:mod:`compat.maps`), unless ``params={"space": "native"}`` asks for its own; one served
through a query blend (its ``adapter/`` a blend, its parent in ``old/``) embeds each image with
both models and returns the blended query (:mod:`compat.maps.blend`). The input is checked here, not by
MLflow's schema enforcement (whose message prints the whole array before the reason;
mlflow_model.py tells MLflow so): anything else is one line, an MLflow
``INVALID_PARAMETER_VALUE`` error naming the shape and dtype given and the ones expected.
Integer images from JSON (``mlflow models serve``) are taken when every value is in 0..255; a
read-only array is read, never written. The folder also carries compat's
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
        from compat.embeddings.embed import inference_model
        from compat.models.version import load_version

        folder = Path(context.artifacts["weights"]).parent
        model, self.card = load_version(folder)
        self.model = inference_model(model)  # folded once here, not per request
        self.adapter = None
        if "adapter_weights" in context.artifacts:
            from compat.maps import load_map  # its weights' sha256 checked against its card

            self.adapter = load_map(Path(context.artifacts["adapter_weights"]).parent)
        self.old = None
        if "old_weights" in context.artifacts:  # a query blend: the parent embeds queries too
            old, _ = load_version(Path(context.artifacts["old_weights"]).parent)
            self.old = inference_model(old)

    def expected(self) -> tuple[int, int, int]:
        """(H, W, C) of the images this version embeds."""
        return (self.card.image_size, self.card.image_size, self.card.in_channels)

    def images(self, model_input) -> np.ndarray:
        """``model_input`` as uint8 (n, H, W, C) images, or one line saying what is wrong."""
        from mlflow.exceptions import MlflowException

        # The schema names its one tensor ``images``: MLflow hands it over as {"images": array}.
        if isinstance(model_input, dict):
            model_input = model_input.get("images", model_input)
        arr = np.asarray(model_input)
        h, w, c = self.expected()
        want = f"expected uint8 images of shape (N, {h}, {w}, {c})"
        integers = arr.dtype != np.uint8 and arr.dtype.kind in "iu" and arr.size > 0
        if integers and arr.min() >= 0 and arr.max() <= 255:  # from JSON: the same pixels
            arr = arr.astype(np.uint8)
        if arr.dtype != np.uint8 or arr.ndim != 4 or arr.shape[1:] != (h, w, c) or not arr.size:
            got = f"input has shape {tuple(arr.shape)} and dtype {arr.dtype}"
            hint = ""
            if arr.ndim == 4 and arr.shape[1] == c and arr.shape[2:] == (h, w):
                hint = " (channels first: transpose to (N, H, W, C))"
            raise MlflowException.invalid_parameter_value(f"{got}; {want}{hint}")
        return arr

    # ``np.ndarray`` is a hint MLflow takes as is: the signature declares the schema.
    def predict(self, context, model_input: np.ndarray, params=None) -> np.ndarray:
        from mlflow.exceptions import MlflowException

        from compat.embeddings.embed import embed_images

        space = (params or {}).get("space", "served")
        if space not in ("served", "native"):
            raise MlflowException.invalid_parameter_value(
                f"space {space!r}: expected 'served' (what the gallery is searched with) or 'native'"
            )
        images = self.images(model_input)
        embeddings = embed_images(self.model, images, fold=False)
        if self.adapter is not None and space == "served":
            if self.old is not None:  # two forward passes: the blend needs the parent's query
                return self.adapter.queries(embeddings, embed_images(self.old, images, fold=False))
            return self.adapter.apply(embeddings)
        return embeddings


mlflow.models.set_model(CompatEmbedder())
