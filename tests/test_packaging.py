"""The distribution: one import package `seq2onnx`, a runtime-only base install, nothing generic leaked."""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CODE_FOLDERS = {"training": "seq2onnx.training", "export": "seq2onnx.export", "runtime": "seq2onnx.runtime"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
                    str(REPO), "-w", str(out)], check=True, capture_output=True, text=True)
    (whl,) = out.glob("seq2onnx-*.whl")
    return whl


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
    shipped = [m.parent for m in (REPO / "models").glob("*/manifest.json")]
    assert shipped, "models/ holds no model package"
    for folder in shipped:
        listed = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["files"]
        for name in ["manifest.json", "MODEL_CARD.md", *listed]:
            assert f"seq2onnx/models/{folder.name}/{name}" in names, f"{folder.name}/{name} is not in the wheel"


def test_base_install_brings_no_torch(wheel, tmp_path):
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
                           "--disable-pip-version-check", "--report", str(report), str(wheel)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"pip could not resolve the base dependencies here (no index?): {proc.stderr.strip()[-300:]}")
    resolved = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert "torch" not in resolved and "onnx" not in resolved, sorted(resolved)
    assert {"numpy", "tokenizers"} <= resolved
    assert resolved & {"onnxruntime", "onnxruntime-gpu"}


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
