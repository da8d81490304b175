"""The README.md of a model package (export/package.py render_readme) lists exactly the graph inputs and outputs
its manifest records, names, types and shapes, for the shipped package, an export of the tiny model and a
format-1 package: generated from the manifest, it cannot describe a graph the package does not have."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from tests import DATA, REPO
from seq2onnx.export.package import render_readme

SHIPPED = REPO / "models" / "numbers-en-de"
FORMAT_1 = DATA / "numbers-en-de-earlier-contract"
ROW = re.compile(r"^\| (input|output) \| `([^`]+)` \| (\w+) \| \[([^\]]*)\]")
GRAPH = re.compile(r"^`(\w+)`( \(.*\))?:$")

Entry = Tuple[str, str, str, str, Tuple[object, ...]]          # graph, input/output, name, dtype, shape


def manifest_of(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))


def readme_io(text: str) -> List[Entry]:
    """Every I/O row of the README's graph tables, under the graph whose heading precedes it."""
    graph, rows = None, []
    for line in text[text.index("## Graphs"):].splitlines():
        heading, row = GRAPH.match(line), ROW.match(line)
        if heading:
            graph = heading.group(1)
        elif row:
            shape = tuple(int(d) if d.isdigit() else d for d in row.group(4).split(", ") if d)
            rows.append((graph, row.group(1), row.group(2), row.group(3), shape))
    return rows


def manifest_io(manifest: dict) -> List[Entry]:
    side = {"inputs": "input", "outputs": "output"}
    return [(graph, side[s], io["name"], io["dtype"], tuple(io["shape"]))
            for graph, entry in manifest["graphs"].items() for s in ("inputs", "outputs") for io in entry[s]]


def check(text: str, manifest: dict) -> None:
    assert readme_io(text) == manifest_io(manifest)
    assert f"format_version {manifest['format_version']}" in text
    for variant in manifest["variants"].values():                 # the files that hold each graph are named
        assert f"`{variant['encoder']}`" in text and f"`{variant['decoder_step']}`" in text


def test_the_shipped_readme_is_generated_from_its_manifest():
    manifest = manifest_of(SHIPPED)
    text = (SHIPPED / "README.md").read_text(encoding="utf-8")
    assert text == render_readme(manifest)                        # regenerated: `past_len` of format 1 is gone
    check(text, manifest)
    assert manifest["format_version"] == 4 and "| `past_length` | int64 | [rows] |" in text and "past_len " not in text
    assert "pip install seq2onnx " not in text                   # no package index holds it


def test_a_format_1_readme_describes_the_growing_cache():
    manifest = manifest_of(FORMAT_1)
    text = render_readme(manifest)
    check(text, manifest)
    assert "past_length" not in text and "past_len + 1" in text and "capacity" not in text


def test_an_export_lists_its_own_graphs(tiny_package):
    manifest = manifest_of(tiny_package)
    check((tiny_package / "README.md").read_text(encoding="utf-8"), manifest)
