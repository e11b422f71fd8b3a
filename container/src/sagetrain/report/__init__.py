"""The job's verdict and the success/failure files SageMaker reads."""

from sagetrain.report.files import write_report
from sagetrain.report.verdict import RankFailure, Verdict

__all__ = ["RankFailure", "Verdict", "write_report"]
