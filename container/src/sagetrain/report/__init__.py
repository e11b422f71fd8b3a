"""The job's verdict and the success/failure files SageMaker reads."""

from sagetrain.report.files import remove_previous_report, write_report
from sagetrain.report.verdict import RankFailure, Verdict

__all__ = ["RankFailure", "Verdict", "remove_previous_report", "write_report"]
