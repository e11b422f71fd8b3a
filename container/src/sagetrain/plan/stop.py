"""How long this host's part of a job may take to stop once it gets SIGTERM: the window the platform
gives before SIGKILL, less a margin for writing the report and leaving. Pure.

SageMaker sends SIGTERM when a job is stopped (StopTrainingJob), reaches MaxRuntimeInSeconds or loses its
spot instance, and SIGKILL 120 s later. The SageMaker SDKs' local mode stops containers as Docker Compose
does, SIGKILL 10 s after SIGTERM; its hosts' resourceconfig.json names an instance type such as ``local``,
``local_gpu`` or ``local_cpu`` where SageMaker's always start with ``ml.``.
"""

from __future__ import annotations

from dataclasses import dataclass

SAGEMAKER_STOP_WINDOW_SECONDS = 120.0
LOCAL_MODE_STOP_WINDOW_SECONDS = 10.0
# Kept back from the window for what follows the programs' end: the ranks' reports, the verdict sent to
# the other hosts, the report written, the exit.
SAGEMAKER_STOP_MARGIN_SECONDS = 10.0
LOCAL_MODE_STOP_MARGIN_SECONDS = 2.0
SAGEMAKER_INSTANCE_PREFIX = "ml."


@dataclass(frozen=True)
class StopWindow:
    seconds: float  # from SIGTERM to this container's exit
    reason: str


DEFAULT_STOP_WINDOW = StopWindow(
    SAGEMAKER_STOP_WINDOW_SECONDS - SAGEMAKER_STOP_MARGIN_SECONDS,
    f"SageMaker sends SIGKILL {SAGEMAKER_STOP_WINDOW_SECONDS:g} s after SIGTERM",
)


def stop_window(configured: float | None, instance_type: str, setting: str) -> StopWindow:
    """The stop window: ``configured`` (the hyperparameter ``setting``) when given, else the platform's
    by the host's ``instance_type``."""
    if configured is not None:
        return StopWindow(configured, f"{setting} is {configured:g}")
    if instance_type.startswith(SAGEMAKER_INSTANCE_PREFIX):
        return DEFAULT_STOP_WINDOW
    return StopWindow(
        LOCAL_MODE_STOP_WINDOW_SECONDS - LOCAL_MODE_STOP_MARGIN_SECONDS,
        f"instance type {instance_type!r} is the SageMaker SDK's local mode, which sends SIGKILL "
        f"{LOCAL_MODE_STOP_WINDOW_SECONDS:g} s after SIGTERM",
    )
