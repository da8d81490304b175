#!/usr/bin/env bash
# Here (no GPU), before using a lent GPU machine (the `device` tool: 64 MiB a call, no internet there, CUDA 13
# and PyTorch already installed): packs what the GPU bench and tests need into .gpu/ (git-ignored there):
#   .gpu/ort.partN   onnxruntime-gpu for CPython 3.12 (~350 MB unpacked), xz, in pieces of 40 MiB: one call each
#   .gpu/ct2/        CTranslate2 and num2words wheels (one call, with setup.sh)
# Then, one call per piece while the machine stays warm (30 s):
#   run(carry=[".gpu/ort.part0"], command="mkdir -p /tmp/c && mv .gpu/ort.part0 /tmp/c/")   ... part4
#   run(carry=[".gpu/ct2"], command="bash scripts/device/setup.sh && . /tmp/env.sh && python3 bench/run.py --device cuda ...")
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >> .git/info/exclude
mkdir -p .gpu/ct2 .gpu/wheels
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
ORT=$(grep -E "^onnxruntime-gpu==" constraints.txt | cut -d= -f3)
CT2=$(grep -E "^ctranslate2==" constraints.txt | cut -d= -f3 || true)
python3 -m pip download -q --no-deps "${PLAT[@]}" -d .gpu/wheels "onnxruntime-gpu==$ORT"
python3 -m pip download -q --no-deps "${PLAT[@]}" -d .gpu/ct2 "ctranslate2${CT2:+==$CT2}"
python3 -m pip download -q --no-deps -d .gpu/ct2 num2words
rm -rf .gpu/ort && mkdir .gpu/ort && (cd .gpu/ort && unzip -q ../wheels/onnxruntime_gpu-*.whl)
rm -f .gpu/ort/onnxruntime/capi/libonnxruntime_providers_tensorrt.so        # not used
tar -cf - -C .gpu/ort . | xz -T2 -9 > .gpu/ort.tar.xz                        # ~200 MB, a few minutes
rm -f .gpu/ort.part* && split -b 40m -d -a 1 .gpu/ort.tar.xz .gpu/ort.part && rm -rf .gpu/ort .gpu/ort.tar.xz
ls -la .gpu .gpu/ct2
