#!/usr/bin/env bash
# make demo: translate a few English numbers into German with the shipped model, through the CLI of a
# runtime-only install (numpy + onnxruntime + tokenizers; no torch). The model is found by name in the
# installed package (seq2onnx.models), not in this checkout. The command it prints is the one it runs
# (from the repository's root); each line of scripts/examples.txt is shown beside its translation.
set -euo pipefail
venv=${1:-.venv-runtime}
examples=scripts/examples.txt
cmd=("$venv/bin/seq2onnx" translate numbers-en-de --beam-size 4)
echo "\$ ${cmd[*]} < $examples" >&2
"${cmd[@]}" < "$examples" | paste -d '\t' "$examples" - | awk -F '\t' '{ printf "%-68s -> %s\n", $1, $2 }'
if "$venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "demo: torch is importable in $venv, but the runtime install should not bring it" >&2; exit 1
fi
