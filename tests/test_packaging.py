"""The distributions: one import package `seq2onnx`, a runtime-only base install, nothing generic leaked; an sdist
that builds the wheel, and a wheel that installs in an empty environment and translates with the shipped model."""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests import REPO
CODE_FOLDERS = {"training": "seq2onnx.training", "export": "seq2onnx.export", "runtime": "seq2onnx.runtime"}
SHIPPED = sorted(m.parent for m in (REPO / "models").glob("*/manifest.json"))


def shipped_files(folder: Path) -> list:
    """What a shipped model package is: its manifest, its model card and every file the manifest lists."""
    listed = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["files"]
    return ["manifest.json", "MODEL_CARD.md", *listed]


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict:
    """`python -m build`: the sdist from the checkout, then the wheel built from that sdist (so the sdist holds what
    a build needs). --no-isolation builds with this environment's setuptools (the test extra asks for the version
    pyproject.toml's build-system needs) instead of downloading one."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (sdist,) = out.glob("seq2onnx-*.tar.gz")
    (whl,) = out.glob("seq2onnx-*.whl")
    return {"sdist": sdist, "wheel": whl}


@pytest.fixture(scope="module")
def wheel(dists) -> Path:
    return dists["wheel"]


def test_wheel_holds_every_subpackage_under_seq2onnx(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    code = [n for n in names if not n.split("/")[0].endswith(".dist-info")]
    assert code and all(n.startswith("seq2onnx/") for n in code), sorted({n.split("/")[0] for n in code})
    # every folder of the source tree that is a Python package must be in the wheel
    for folder, package in CODE_FOLDERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.relative_to(REPO / folder).parent
            target = "/".join(["seq2onnx", package.split(".")[1], *rel.parts, "__init__.py"])
            assert target in names, f"{init} is not packaged: list it in pyproject's packages"
        for py in (REPO / folder).rglob("*.py"):
            rel = py.relative_to(REPO / folder)
            assert "/".join(["seq2onnx", package.split(".")[1], *rel.parts]) in names, f"{py} missing from the wheel"


def test_wheel_ships_every_model_package_whole(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert SHIPPED, "models/ holds no model package"
    for folder in SHIPPED:
        for name in shipped_files(folder):
            assert f"seq2onnx/models/{folder.name}/{name}" in names, f"{folder.name}/{name} is not in the wheel"


def test_sdist_holds_what_a_build_needs_and_no_tests(dists):
    with tarfile.open(dists["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for name in ("pyproject.toml", "README.md", "LICENSE", "models/__init__.py"):
        assert name in names, f"{name} is not in the sdist"
    for folder in SHIPPED:
        for name in shipped_files(folder):
            assert f"models/{folder.name}/{name}" in names, f"models/{folder.name}/{name} is not in the sdist"
    for folder in CODE_FOLDERS:
        for py in (REPO / folder).rglob("*.py"):
            assert py.relative_to(REPO).as_posix() in names, f"{py} is not in the sdist"
    # the test suite needs the whole checkout (web/, bench/, tests/data): half of it would only mislead
    assert not any(n.startswith(("tests/", "web/", "bench/")) for n in names), sorted(names)


def test_python_and_npm_packages_have_one_version():
    from seq2onnx.runtime import __version__
    assert json.loads((REPO / "web" / "package.json").read_text(encoding="utf-8"))["version"] == __version__


def test_wheel_installs_in_an_empty_venv_and_translates_with_the_shipped_model(wheel, tmp_path):
    """The wheel alone, in a new venv: its console script, its seq2onnx package and its shipped model, from an empty
    folder. The runtime's dependencies (numpy, onnxruntime, tokenizers) are this environment's, put on the venv's
    path after its own site-packages by a .pth file, so nothing is downloaded. This environment's seq2onnx stays out:
    an editable one's finder is a .pth file there, which a .pth line does not run (it only adds the folder), and a
    regular one comes after the venv's own; the test checks that the code and the model it runs are the wheel's."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    venv_site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                    check=True, capture_output=True, text=True).stdout.strip())
    ours = dict.fromkeys([*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])])
    (venv_site / "deps-of-the-test-environment.pth").write_text("".join(f"{p}\n" for p in ours), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--ignore-installed",
                           "--no-index", "--disable-pip-version-check", str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]

    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    where = subprocess.run([str(py), "-c", "import seq2onnx.runtime as r; from seq2onnx.runtime.package.shipped_models import "
                            "resolve_model_dir as m; print(r.__file__); print(m('numbers-en-de'))"],
                           cwd=empty, env=env, check=True, capture_output=True, text=True).stdout.split("\n")
    for line in where[:2]:          # the code and the model are the wheel's, not this checkout's
        assert Path(line).resolve().is_relative_to(venv_site.resolve()), where

    lines = "forty-two\nthree hundred and one\n999999\nhello\n"
    args = ["translate", "numbers-en-de", "--beam-size", "4", "--scores", "--device", "cpu", "--intra-threads", "1"]
    installed = subprocess.run([str(venv / "bin" / "seq2onnx"), *args], input=lines, cwd=empty, env=env,
                               capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr[-2000:]
    # the checkout's CLI on the same lines with the same flags: the same code on the same onnxruntime, one thread on
    # the CPU, so the same arithmetic in the same order: equal to the last digit; and four lines out for four in
    checkout = subprocess.run([sys.executable, "-m", "seq2onnx.runtime.cli", *args], input=lines, cwd=empty,
                              capture_output=True, text=True, timeout=120)
    assert checkout.returncode == 0, checkout.stderr[-2000:]
    assert installed.stdout == checkout.stdout, (installed.stdout, checkout.stdout)
    assert len(installed.stdout.splitlines()) == 4, installed.stdout


def test_base_install_brings_no_torch(wheel, tmp_path):
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
                           "--disable-pip-version-check", "--report", str(report), str(wheel)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"pip could not resolve the base dependencies here (no index?): {proc.stderr.strip()[-300:]}")
    resolved = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert "torch" not in resolved and "onnx" not in resolved, sorted(resolved)
    assert {"numpy", "tokenizers", "onnxruntime"} <= resolved
    assert "onnxruntime-gpu" not in resolved, "the base install is the CPU onnxruntime (README \"Install\")"


def test_base_requirements_are_the_cpu_onnxruntime_on_every_platform(wheel):
    """The wheel's own metadata, read without an index: onnxruntime for everyone, unconditionally, and never
    onnxruntime-gpu beside it (both install the module `onnxruntime`; a GPU user swaps one for the other)."""
    from packaging.requirements import Requirement

    metadata = zipfile.ZipFile(wheel).read(next(n for n in zipfile.ZipFile(wheel).namelist()
                                                 if n.endswith(".dist-info/METADATA"))).decode()
    requires = [Requirement(line.split(":", 1)[1]) for line in metadata.splitlines()
                if line.startswith("Requires-Dist:")]
    base = {r.name.lower(): r for r in requires if r.marker is None or "extra" not in str(r.marker)}
    assert "onnxruntime" in base and base["onnxruntime"].marker is None, sorted(map(str, requires))
    assert not any(r.name.lower() == "onnxruntime-gpu" for r in requires), sorted(map(str, requires))


def lock_pins() -> dict:
    """constraints.txt: canonical name -> (line, version)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==" and not req.marker and not req.extras, f"constraints.txt: {line!r} is not a pin"
            pins[canonicalize_name(req.name)] = (line, spec.version)
    return pins


def test_lock_pins_versions_a_public_index_serves():
    """A local version label (torch==2.13.0+cpu) is a build no public index serves, so pip could not resolve the lock
    on a machine without that wheel: the lock pins the public version, which a local CPU build still meets."""
    pins = lock_pins()
    local = [line for line, version in pins.values() if "+" in version]
    assert not local, f"constraints.txt pins local builds {local}: pin the public version (scripts/lock.sh drops labels)"
    assert "torch" in pins and "onnxruntime" in pins


def test_lock_tests_the_cpu_onnxruntime_and_pins_the_gpu_one_at_its_version():
    pins = lock_pins()
    assert pins["onnxruntime"][1] == pins["onnxruntime-gpu"][1], (pins["onnxruntime"], pins["onnxruntime-gpu"])


def test_lock_covers_every_requirement_of_pyproject():
    """Each package pyproject.toml names (the base and every extra make lock resolves) is pinned: a new one without
    `make lock` would install unlocked, at whatever version the day brings."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {canonicalize_name(Requirement(r).name)
             for r in [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]}
    names.discard("seq2onnx")
    missing = sorted(names - set(lock_pins()))
    assert not missing, f"pyproject.toml names {missing}, which constraints.txt does not pin: run `make lock`"


def test_hf_folders_runs_as_a_script_without_pytest():
    """`python -m tests.hf_folders OUT_DIR` (its docstring) in an environment without pytest: here pytest is made
    unimportable, and the script with no OUT_DIR must reach its own usage line (exit 2), not an ImportError."""
    code = ("import runpy, sys; sys.modules['pytest'] = None; sys.argv = ['hf_folders']; "
            "runpy.run_module('tests.hf_folders', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("usage: python -m tests.hf_folders OUT_DIR"), proc.stderr


def test_nothing_generic_leaks_into_site_packages(tmp_path):
    # run from an empty folder so the source tree is not on sys.path
    for name in ("training", "runtime", "export"):
        proc = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, f"`import {name}` worked"
    proc = subprocess.run([sys.executable, "-c", "import seq2onnx.runtime, seq2onnx.training, seq2onnx.export"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_console_script_lists_commands(tmp_path):
    exe = Path(sys.executable).parent / "seq2onnx"
    proc = subprocess.run([str(exe), "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0
    for cmd in ("train", "average", "export", "translate", "info", "data"):
        assert f"  {cmd} " in proc.stdout
