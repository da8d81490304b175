"""scripts/layers.py: the runtime's imports read with ast: no import circle, no private name taken across modules."""
from __future__ import annotations

import importlib.util
import sys
import textwrap

from tests import REPO

SCRIPT = REPO / "scripts" / "layers.py"


def _script():
    spec = importlib.util.spec_from_file_location("layers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module                     # its dataclass reads its annotations from it
    spec.loader.exec_module(module)
    return module


def test_the_runtime_has_no_import_circle_and_no_private_import():
    layers = _script()
    report = layers.read(REPO / "runtime")
    assert report.circles == []
    assert report.private == []
    sizes = layers.layer_sizes(report)
    assert set(sizes) == {layers.TOP, "cli", "decode", "documents", "engine", "package", "ray", "serve"}
    assert sum(files for files, _ in sizes.values()) == len(report.modules)
    # the edges are read: the server's app imports its service, the translator the options
    assert "runtime.serve.service" in report.edges["runtime.serve.app"]
    assert "runtime.options" in report.edges["runtime.translator"]


def _package(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_a_circle_and_a_private_import_are_found(tmp_path, capsys):
    """A tiny package: a <-> b through a function's import and a sub-package's relative import, c takes a's _hidden
    (by name, and as a module's attribute); d imports a without a circle."""
    root = tmp_path / "pkg"
    _package(root, {
        "__init__.py": "",
        "a.py": "from .sub.b import thing\n_hidden = 1\n",
        "sub/__init__.py": "",
        "sub/b.py": "def thing():\n    from .. import a\n    return a\n",
        "c.py": "from .a import _hidden\nfrom . import a\nx = a._hidden\n",
        "d.py": "from seq2onnx.pkg.a import thing\n",
    })
    layers = _script()
    report = layers.read(root)
    assert report.circles == [["pkg.a", "pkg.sub.b"]]
    assert sorted((m, line, source, name) for m, line, source, name in report.private) == [
        ("pkg.c", 1, "pkg.a", "_hidden"), ("pkg.c", 3, "pkg.a", "_hidden")]
    assert report.edges["pkg.d"] == {"pkg.a"}
    assert layers.main([str(root)]) == 1
    out = capsys.readouterr().out
    assert "import circles: 1\n  pkg.a <-> pkg.sub.b" in out
    assert "pkg.c:1 takes _hidden from pkg.a" in out
