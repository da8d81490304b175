#!/usr/bin/env bash
set -euo pipefail
venv=${1:-.venv-runtime}
if [ ! -f models/numbers-en-de/manifest.json ]; then
  echo "demo: no shipped model yet (models/numbers-en-de); train and export one as the README shows" >&2
  exit 1
fi
printf 'three hundred and one\nfour hundred and ninety-five thousand, five hundred and seventeen\n' \
  | "$venv/bin/seq2onnx" translate models/numbers-en-de
