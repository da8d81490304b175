"""Shared fixtures. A tiny model is trained once per test session (fixtures_training.py), exported
once (fixtures_export.py), and the runtime tests decode it: the real pipeline at small size.

Property tests (hypothesis) draw new examples on a developer's machine, so each run explores more;
under CI (the CI environment variable set, as .ci/run has it) they draw the same examples every run
(derandomize), so a CI result depends on the commit alone."""
import os

from hypothesis import settings

pytest_plugins = ["fixtures_training", "fixtures_export"]

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
