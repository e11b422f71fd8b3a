"""A valid script: the bad-input cases break something else around it (configs, channels, shape)."""

print("train.py ran")
