"""The trainer's notes follow the job's log level; failures and epoch lines do not."""

import logging

import pytest
from sagetrain.errors import PlatformError
from sagetrain.trainer.errorfile import report_failure
from sagetrain.trainer.notes import Notes, job_log_level, shown


@pytest.mark.parametrize(
    ("note_level", "job_level", "printed"),
    [
        (logging.INFO, logging.INFO, True),
        (logging.INFO, logging.DEBUG, True),
        (logging.INFO, logging.WARNING, False),
        (logging.WARNING, logging.WARNING, True),
        (logging.WARNING, logging.INFO, True),
        (logging.WARNING, logging.ERROR, False),
    ],
)
def test_a_note_shows_at_or_above_the_jobs_level(note_level, job_level, printed):
    assert shown(note_level, job_level) is printed


@pytest.mark.parametrize(
    ("environ", "level"),
    [({}, 20), ({"SM_LOG_LEVEL": ""}, 20), ({"SM_LOG_LEVEL": "30"}, 30), ({"SM_LOG_LEVEL": "10"}, 10)],
)
def test_the_jobs_level_comes_from_sm_log_level(environ, level):
    assert job_log_level(environ) == level


def test_a_level_that_is_not_one_is_named():
    with pytest.raises(PlatformError, match=r"SM_LOG_LEVEL='-3' .* is not a logging level"):
        job_log_level({"SM_LOG_LEVEL": "-3"})


def test_notes_print_what_the_level_lets_through_and_failures_always(capsys):
    Notes(logging.WARNING).info("resuming")
    Notes(logging.WARNING).warning("epoch 3 restarts")
    Notes(logging.ERROR).warning("hidden")
    Notes(logging.INFO).info("exported")
    report_failure("training failed", None)
    assert capsys.readouterr().err.splitlines() == [
        "sagetrain.trainer: epoch 3 restarts",
        "sagetrain.trainer: exported",
        "sagetrain.trainer: training failed",
    ]
