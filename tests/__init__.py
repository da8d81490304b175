"""The test suite, in folders that mirror the source: training/, export/, runtime/ (the API's tests at its top; then
package/, engine/, decode/, documents/, cli/, serve/, ray/), properties/ (hypothesis over the whole option space, and
fuzzing), bench/ (the benchmark's helpers), scripts/; here, the whole project's (the distributions, the shipped model).
A module's tests are in the file named after it (runtime/decode/constraints.py: runtime/decode/test_constraints.py),
its hostile cases among them (a model folder's, whichever module refuses it: runtime/package/test_hostile_packages.py).

Every folder is a package, so pytest imports a test module by its dotted name from the repository root (two folders
may each hold a test_files.py), and everything is imported that way: the shared fixtures and helpers here
(`from tests.fixtures_training import toy_pairs`, `from tests.agreement import ...`), another file's helpers
(`from tests.runtime.serve.test_serve import Server`). conftest.py here is every folder's; a new folder needs an
empty __init__.py."""
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent          # the repository root
DATA = REPO / "tests" / "data"                         # packages kept as they were exported before a change
