"""``python -m localcluster``: what scripts/local-cluster runs."""

import sys

from localcluster.cli import main

if __name__ == "__main__":
    sys.exit(main())
