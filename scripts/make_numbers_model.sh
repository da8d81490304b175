#!/usr/bin/env bash
# Reproduce models/numbers-en-de from nothing: data -> train -> export -> evaluate -> model card.
#
#   bash scripts/make_numbers_model.sh [VENV]      (or: make numbers-model)
#
# VENV needs the train extra (torch). Intermediate files go to $WORK (default build/numbers); the
# package is written to $OUT (default models/numbers-en-de), atomically, replacing the one there.
# Training is bit-identical on CPU for a fixed --threads and --seed, and an interrupted run resumes
# where its last checkpoint left off when the script is started again.
# About 60 minutes on a 2-core machine, most of it training.
set -euo pipefail
venv=${1:-.venv}
work=${WORK:-build/numbers}
out=${OUT:-models/numbers-en-de}
s2o="$venv/bin/seq2onnx"
mkdir -p "$work"

# 1. data: every number below 1,000 forty times and those below 20 two hundred times (43,200 lines), plus
#    356,800 numbers sampled from 1,000..999,999; 1,000 valid and 1,000 test numbers. Train and valid lines
#    are in the forms people type (case, hyphen or space, "and", comma, "a hundred", digits with or without
#    separators). 0..19 are words no larger number teaches: at forty, "zero" -> "null" was never learned.
data_args=(--size 400000 --repeat-small 40 --repeat-below-20 200 --forms mixed --seed 1)
"$s2o" data numbers --out "$work/data" "${data_args[@]}" --force

# 2. train: the small preset (d_model 128, 4 heads, 3+3 layers, FFN 512), a 200-piece joint BPE that
#    lower-cases, groups digit runs by thousands and splits digits and punctuation into pieces of their
#    own (so case cannot matter, "1234" reads as "1 , 2 3 4", digit by digit, with its thousands marked),
#    the paper's schedule with a short warm-up, a checkpoint every 500 steps. --init xavier learns this
#    task fastest (bench/tiny_learning.py --inits). --maxi-batch 10: length-sorting the whole epoch (the
#    default) put the 40 copies of "two" into one batch of ~960, so the model saw it once an epoch and forgot
#    it in between (it answered "zweihundertzwei"); pools of 10 batches spread them over ~30 batches an epoch
max_steps=${MAX_STEPS:-6000}
train_args=(--train "$work/data/train.tsv" --valid "$work/data/valid.tsv" --preset small --vocab-size 200
            --init xavier --lowercase --split-digits --group-digits --split-punctuation
            --max-tokens 4096 --maxi-batch 10 --lr-factor 1.0 --warmup-steps 800 --max-steps "$max_steps" --valid-interval 500
            --valid-decode-max 1000 --best-metric exact_match --keep-last 5 --threads 2 --seed 1
            --log-interval 100 --out "$work/run")
done_steps=0
if [ -f "$work/run/last.pt" ]; then
  done_steps=$("$venv/bin/python" -c 'import sys, torch
print(torch.load(sys.argv[1], map_location="cpu", weights_only=False)["train_meta"]["step"])' "$work/run/last.pt")
fi
if [ "$done_steps" -ge "$max_steps" ]; then
  echo "training: $work/run already holds step $done_steps; skipped"
elif [ "$done_steps" -gt 0 ]; then
  "$s2o" train "${train_args[@]}" --resume
else
  "$s2o" train "${train_args[@]}"
fi

# 3. average the last 5 checkpoints (the paper's; steps 4,000..6,000) and export the average as fp32 + int8,
#    parity-checked against PyTorch on validation sentences. Single checkpoints each miss a different small
#    number (the learning rate is still 1.2e-3 at step 6,000); their average misses none.
"$s2o" average "$work/run" --last 5 --out "$work/run/averaged.pt"
"$s2o" export "$work/run/averaged.pt" "$out" --int8 --parity-data "$work/data/valid.tsv" --source-lang en \
  --target-lang de --overwrite

# 4. measure every form through `seq2onnx translate` and write MODEL_CARD.md ($work/card.json: the figures)
"$venv/bin/python" scripts/numbers_model_card.py --model "$out" --data "$work/data" --run "$work/run" \
  --checkpoint "$work/run/averaged.pt" --seq2onnx "$s2o" --data-args "${data_args[*]}" \
  --train-args "${train_args[*]}" --figures "$work/card.json"
