#!/usr/bin/env bash
# make demo: translate a few English numbers into German with the shipped model, through the CLI of a
# runtime-only install (numpy + onnxruntime + tokenizers; no torch). The model is found by name in the
# installed package (seq2onnx.models), not in this checkout.
set -euo pipefail
venv=${1:-.venv-runtime}
examples=$(mktemp)
trap 'rm -f "$examples"' EXIT
cat > "$examples" <<'LINES'
forty-two
three hundred and one
two thousand and twenty-six
four hundred and ninety-five thousand, five hundred and seventeen
nine hundred and ninety-nine thousand, nine hundred and ninety-nine
LINES
echo "\$ seq2onnx translate numbers-en-de --beam-size 4 < examples.txt" >&2
"$venv/bin/seq2onnx" translate numbers-en-de --beam-size 4 --input "$examples" \
  | paste -d '\t' "$examples" - | awk -F '\t' '{ printf "%-68s -> %s\n", $1, $2 }'
if "$venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "demo: torch is importable in $venv, but the runtime install should not bring it" >&2; exit 1
fi
