#!/usr/bin/env bash
# The prepared GPU check (issue 53): set-up, the CUDA tests, the GPU benchmark, its results to $OUT, in one device
# call planned at under 7 minutes (--quick: under 3), after the machine's start and the five calls that carry
# onnxruntime-gpu (about 3 minutes together). bench/README.md ("On a GPU") has the plan; in short:
#
#   here, once (no GPU):  bash bench/gpu_check.sh pack          # scripts/device/pack.sh -> .gpu/ (git-ignored)
#   rehearse here:        bash bench/gpu_check.sh --device cpu --dry-run [--quick]
#   on the lent machine, one `run` per piece while it stays warm (30 s between calls):
#     run(carry=[".gpu/ort.part0"], command="bash bench/gpu_check.sh receive")      ... the same for part1 .. part4
#     run(carry=[".gpu/ct2"], command="bash bench/gpu_check.sh", timeout_s=420)    # or --quick, timeout_s=150
#
# Steps (each with a time limit, so that a hung step leaves the others their time):
#   setup    scripts/device/setup.sh: the carried onnxruntime-gpu and CTranslate2 into /tmp/site, /tmp/env.sh
#   tests    pytest tests/runtime/engine/test_cuda.py (the IO-binding engine and the CUDA provider against the CPU one)
#   bench    bench/run.py --device cuda: ours fp32 / fp16, our PyTorch reference, CTranslate2 float32 / float16 /
#            int8_float16, HF transformers fp32 / fp16, vocab 8000, 3 rounds -> bench/results/latest-cuda.{json,md}
#            (--quick: run.py --quick, tiny models, vocab 1000, 2 rounds -> $OUT only)
#   copy     the results and every step's log to $OUT
# --device cpu --dry-run runs every step here on the CPU at a tiny size (set-up: checks what would travel; tests:
# runtime/engine/test_cuda.py on the CPU provider, its CUDA tests skipped; bench: run.py --quick --device cpu) and prints the
# command each step would run on the GPU, so the first GPU minute is not spent on a typo.
set -uo pipefail
cd "$(dirname "$0")/.."

MODE=full DEVICE=cuda DRY=0
for arg in "$@"; do
  case "$arg" in
    pack) exec bash scripts/device/pack.sh ;;
    receive)                                   # a piece of onnxruntime-gpu, carried by this call, kept for setup
      mkdir -p /tmp/c && mv .gpu/ort.part* /tmp/c/ && ls -la /tmp/c; exit ;;
    --quick) MODE=quick ;;
    --dry-run) DRY=1 ;;
    --device) ;;
    cpu|cuda) DEVICE=$arg ;;
    *) echo "bench/gpu_check.sh: unknown argument '$arg' (pack, receive, --quick, --device cpu|cuda, --dry-run)" >&2
       exit 2 ;;
  esac
done
if [ "$DEVICE" = cpu ] && [ "$DRY" = 0 ]; then
  echo "bench/gpu_check.sh: --device cpu is the rehearsal: add --dry-run" >&2; exit 2
fi

OUT=${OUT:-bench/.cache/gpu_check/out}         # the device tool sets OUT; here the rehearsal's results stay local
mkdir -p "$OUT"
PY=python3
[ "$DEVICE" = cpu ] && [ -x .venv/bin/python ] && PY=$PWD/.venv/bin/python
STATUS=0
T0=$(date +%s)

# limits of each step, seconds: full / quick (the tests train a tiny model first: ~1 min)
if [ "$MODE" = quick ]; then T_SETUP=40 T_TESTS=70 T_BENCH=60; else T_SETUP=60 T_TESTS=120 T_BENCH=240; fi
[ "$DRY" = 1 ] && T_TESTS=1800 T_BENCH=1800    # the rehearsal: on 2 cores shared with other work, the tests took 14 min
if [ "$MODE" = quick ]; then
  GPU_BENCH=(bench/run.py --device cuda --quick --vocab-sizes 1000 --rounds 2 --no-scaling --out "$OUT")
else
  GPU_BENCH=(bench/run.py --device cuda --systems ours torch ct2 hf --vocab-sizes 8000 --rounds 3)
fi
CPU_BENCH=(bench/run.py --device cpu --quick --systems ours torch ct2 hf --vocab-sizes 1000 --rounds 1 --no-scaling
           --no-memory --out bench/.cache/gpu_check/results)
TESTS=(-m pytest -q -x -p no:cacheprovider runtime/engine/test_cuda.py)

step() {          # step NAME LIMIT COMMAND...: runs it with its log in $OUT/NAME.log; a failure is counted, not fatal
  local name=$1 limit=$2; shift 2
  echo "== $name ($(($(date +%s) - T0))s in; limit ${limit}s): $*"
  timeout "$limit" "$@" > >(tee "$OUT/$name.log") 2>&1
  local rc=$?
  [ $rc = 124 ] && echo "== $name: ran past its ${limit}s"
  [ $rc != 0 ] && { echo "== $name: exit $rc"; STATUS=1; }
  return 0
}

would() { echo "   on the GPU it runs: $*"; }

# --- setup ---------------------------------------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then
  would "bash scripts/device/setup.sh && . /tmp/env.sh"
  for f in scripts/device/setup.sh scripts/device/pack.sh; do bash -n "$f" || STATUS=1; done
  if ls .gpu/ort.part* >/dev/null 2>&1 && ls .gpu/ct2/*.whl >/dev/null 2>&1; then
    echo "   carried: $(ls .gpu | tr '\n' ' ')($(du -sh .gpu | cut -f1)); each call carries one piece (<= 40 MiB)"
  else
    echo "   .gpu/ is not packed yet: run 'bash bench/gpu_check.sh pack' here before the device calls"
  fi
else
  step setup "$T_SETUP" bash scripts/device/setup.sh
  # shellcheck disable=SC1091
  . /tmp/env.sh || { echo "== setup left no /tmp/env.sh: were the pieces received? (see the header)"; exit 1; }
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
fi

# --- tests ---------------------------------------------------------------------------------------------------------
[ "$DRY" = 1 ] && would "cd tests && python3 ${TESTS[*]}"
step tests "$T_TESTS" env -C tests "$PY" "${TESTS[@]}"
if grep -q "skipped" "$OUT/tests.log" 2>/dev/null && [ "$DEVICE" = cuda ]; then
  echo "== tests: some skipped on the GPU machine (the reasons are in tests.log)"; STATUS=1
fi

# --- bench ---------------------------------------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then
  would "python3 ${GPU_BENCH[*]}"
  step bench "$T_BENCH" "$PY" "${CPU_BENCH[@]}"
else
  step bench "$T_BENCH" "$PY" "${GPU_BENCH[@]}"
fi

# --- copy ----------------------------------------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then
  would "cp bench/results/latest-cuda.json bench/results/latest-cuda.md \"\$OUT\"/   (--quick: run.py writes to \$OUT)"
  ls bench/.cache/gpu_check/results/quick.json bench/.cache/gpu_check/results/quick.md >/dev/null || STATUS=1
elif [ "$MODE" = full ]; then
  cp bench/results/latest-cuda.json bench/results/latest-cuda.md "$OUT"/ || STATUS=1
fi
echo "== done in $(($(date +%s) - T0))s, status $STATUS; in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $STATUS
