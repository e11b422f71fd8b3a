"""The SageMaker Python SDK v3's own container drivers (``ModelTrainer`` with ``SourceCode``), met in this
image: the top floor of the package, which nothing below imports.

The image's ``.pth`` hook calls ``at_interpreter_start`` in every Python process, user ranks included, so
it decides from argv and the environment alone, with nothing imported but the SDK's names, whether the
process may be one of the SDK's: a driver script of the drivers channel, or a process of ``sm_train.sh``
(whose environment has the SDK's variables). Only then is the registry of driver paths (``v3.py``)
imported, to say which it is and prepare it. Every path there is recognised only in a process that shows
one of these signs.
"""

from __future__ import annotations

from sagetrain.config.sdk_names import DISTRIBUTED_CONFIG_VAR, DRIVERS_CHANNEL, SOURCE_DIR_VAR

# Not typing's: importing typing (or collections.abc) would cost this hook milliseconds in every process.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, MutableMapping, Sequence


def may_be_sdk_process(argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether this interpreter shows a sign of the SDK's: a script in the drivers channel, or the
    variables of its shell. Pure."""
    script = argv[0] if argv else ""
    return f"/{DRIVERS_CHANNEL}/" in script or SOURCE_DIR_VAR in environ or DISTRIBUTED_CONFIG_VAR in environ


def at_interpreter_start(
    argv: Sequence[str], environ: MutableMapping[str, str], orig_argv: Sequence[str] = ()
) -> None:
    """What the image's ``.pth`` hook calls: ``v3.at_interpreter_start``, in a process that may be the
    SDK's; in any other, nothing."""
    if may_be_sdk_process(argv, environ):
        from sagetrain.sdk import v3

        v3.at_interpreter_start(argv, environ, orig_argv)
