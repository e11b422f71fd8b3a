"""scripts/local-cluster as a package; each name is imported from the module that owns it."""
