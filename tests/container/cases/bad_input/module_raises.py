"""A Keras model module whose build_model raises."""


def build_model(hp):
    raise ValueError(f"units must be positive, got {hp.get('units', -1)}")
