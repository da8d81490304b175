"""Print pip constraints that pin each runtime dependency of pyproject.toml to the lowest version its
range allows (`numpy>=1.24.2` -> `numpy==1.24.2`), for `make test-oldest`. Every dependency is listed,
whatever its environment marker: a constraint on a package that is not installed does nothing."""
import re
import sys
import tomllib
from pathlib import Path

pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
for requirement in tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]:
    match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)\s*(;.*)?", requirement)
    if not match:
        sys.exit(f"lowest_versions.py: {requirement!r} has no plain '>=' lower bound: give it one in pyproject.toml")
    print(f"{match[1]}=={match[2]}")
