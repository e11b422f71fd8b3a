"""A script that fails with its own exit code."""

import sys

print("about to exit with 3", flush=True)
sys.exit(3)
