"""The user's code: where it is, what it needs installed, what kind of program it is, its argv."""
