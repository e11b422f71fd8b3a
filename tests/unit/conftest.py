"""scripts/ on sys.path, as scripts/local-cluster puts it there itself: the unit tests import the package
scripts/localcluster/ by its module names."""

import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))
