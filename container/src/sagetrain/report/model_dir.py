"""Whether a job that succeeded left a model: SageMaker uploads /opt/ml/model as the job's model
artifact, and a program that saved nothing there (a model module misnamed into a plain script, a script
that saves elsewhere) gets an empty one without a word unless we say so."""

from __future__ import annotations

import os
from pathlib import Path

from sagetrain.config.toolkit_env import MODEL_DIR_VAR


def holds_a_file(folder: Path) -> bool:
    """Whether anything but folders is under ``folder``; stops at the first one found."""
    pending = [folder]
    while pending:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(Path(entry.path))
                    else:
                        return True
        except OSError:
            continue
    return False


def empty_model_warning(model_dir: Path) -> str | None:
    """The warning for a successful job whose model folder holds nothing; None when it holds a file."""
    if holds_a_file(model_dir):
        return None
    return (
        f"the job succeeded but left {model_dir} empty, so SageMaker uploads an empty model artifact: save "
        f"the model there (the folder {MODEL_DIR_VAR} names) from one rank, e.g. rank 0 or the chief"
    )
