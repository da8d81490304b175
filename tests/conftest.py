"""Shared fixtures. A tiny model is trained once per test session (fixtures_training.py), exported
once (fixtures_export.py), and the runtime tests decode it: the real pipeline at small size.

Property tests (hypothesis) draw new examples on a developer's machine, so each run explores more;
under CI (the CI environment variable set, as .ci/run has it) they draw the same examples every run
(derandomize), so a CI result depends on the commit alone.

PyTorch (and numpy's BLAS) run one thread in the tests and in the processes they start (OMP_NUM_THREADS=1,
unless set already; set here before anything imports torch). The models here are tiny, so a second thread gains
nothing, and on a busy machine (make test runs three streams on CI's two cores) each of its parallel
regions waits for a descheduled thread, which makes a second thread many times slower than one
(bench/results/shared-machine.md). onnxruntime keeps its own thread pool
(SessionConfig.intra_threads): the runtime's defaults are what the tests run."""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

from hypothesis import settings  # noqa: E402 - after OMP_NUM_THREADS

pytest_plugins = ["tests.fixtures_training", "tests.fixtures_export"]

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
