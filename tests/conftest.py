"""Shared fixtures. A tiny model is trained once per test session (fixtures_training.py), exported
once (fixtures_export.py), and the runtime tests decode it: the real pipeline at small size."""
pytest_plugins = ["fixtures_training", "fixtures_export"]
