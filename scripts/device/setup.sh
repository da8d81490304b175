#!/usr/bin/env bash
# On the lent GPU machine, from the repo root (see pack.sh): unpacks the carried onnxruntime-gpu and CTranslate2
# into /tmp/site once per lease, links this checkout as the seq2onnx package, and writes /tmp/env.sh.
# CTranslate2's PyPI wheel opens libcublas.so.12 by name; the machine has CUDA 13 only (the cuBLAS 12 wheel,
# 581 MB, does not fit the transfer limit), so libcublas.so.12 is a link to its cuBLAS 13 there: check that
# CTranslate2 float32 still equals the PyTorch reference in the bench's fidelity table.
set -e
if [ ! -f /tmp/site/.done ]; then
  mkdir -p /tmp/site
  cat /tmp/c/ort.part* | python3 -c "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/site', filter='data')"
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/ct2/*.whl
  touch /tmp/site/.done
fi
rm -rf /tmp/s2o && mkdir -p /tmp/s2o/seq2onnx
for d in runtime training export models; do ln -s "$PWD/$d" /tmp/s2o/seq2onnx/$d; done
NV=$(find / -xdev \( -name 'libcublas.so.13' -o -name 'libcudart.so.13' -o -name 'libcurand.so.10' -o -name 'libcudnn.so.9' -o -name 'libcufft.so.12' \) 2>/dev/null | xargs -n1 dirname | sort -u | tr '\n' ':')
mkdir -p /tmp/cu12 && ln -sf "$(find / -xdev -name 'libcublas.so.13' 2>/dev/null | head -1)" /tmp/cu12/libcublas.so.12
cat > /tmp/env.sh <<ENV
export PYTHONPATH=/tmp/site:/tmp/s2o
export LD_LIBRARY_PATH=/tmp/cu12:${NV}\${LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
ENV
. /tmp/env.sh
python3 -c "
import onnxruntime as o, ctranslate2 as c, torch
print('onnxruntime', o.__version__, o.get_available_providers())
print('ctranslate2', c.__version__, 'CUDA devices:', c.get_cuda_device_count())
print('torch', torch.__version__, torch.cuda.get_device_name(0))
"
