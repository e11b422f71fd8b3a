"""Rank 0's export: ``<model_dir>/1/`` (a SavedModel with a ``serving_default`` signature, as TF Serving
reads it) and ``<model_dir>/model.keras``."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

SAVED_MODEL_VERSION = "1"


def export_model(model: Any, model_dir: Path) -> tuple[Path, Path]:
    model_dir.mkdir(parents=True, exist_ok=True)
    saved_model = model_dir / SAVED_MODEL_VERSION
    staging = model_dir / f".{SAVED_MODEL_VERSION}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    # Keras 3 and tf-keras both have Model.export(); it writes the serving_default signature.
    model.export(str(staging), verbose=False) if _accepts_verbose(model) else model.export(str(staging))
    shutil.rmtree(saved_model, ignore_errors=True)
    staging.replace(saved_model)
    keras_file = model_dir / "model.keras"
    model.save(str(keras_file))
    return saved_model, keras_file


def _accepts_verbose(model: Any) -> bool:
    import inspect

    return "verbose" in inspect.signature(model.export).parameters
