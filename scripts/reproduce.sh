#!/usr/bin/env bash
# Reproduce the regime tables and plots of docs/regimes.md: the small-batch study (MLP and CNN) and the
# variable-length study (RNN), 5 seeds each (packed: each configuration's seeds train as one pack, see
# docs/packing.md), then `normbench summarize` on both. Sized for about 20-25 minutes on 2 CPU cores (2
# jobs at once, 1 torch thread each); every setting below is an override of the shipped experiments
# (normbench/configs/experiment/), which are the full-size studies.
#
#   scripts/reproduce.sh                                   # everything, into outputs/reproduce/
#   PYTHON=.venv/bin/python scripts/reproduce.sh           # with a given interpreter
#   QUICK=1 OUT=/tmp/pilot scripts/reproduce.sh            # a few-minute pilot: 1 seed, 2 norms, 2 batch sizes
#   SEEDS=0,1,2 JOBS=4 scripts/reproduce.sh                # other seeds, on a 4-core machine
#
# Why these settings: one epoch on a 20k-image training subset keeps the CNN's runs (the slowest: ~1k
# images/s per core at batch 2) affordable; the CNN is halved in width (16/32 channels) for the same
# reason and skips batch sizes 4, 16, 64; the MLP is cheap, so it gets every batch size. The RNN trains
# on the full training set for 2 epochs (it is fast). Timings of each study go to $OUT/timing.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python}
OUT=${OUT:-outputs/reproduce}
JOBS=${JOBS:-2}
if [ -n "${QUICK:-}" ]; then
  SEEDS=${SEEDS:-0}; NORMS=${NORMS:-bn,ln}; MLP_BATCHES=${MLP_BATCHES:-2,128}; CNN_BATCHES=${CNN_BATCHES:-2,128}
  RNN_NORMS=${RNN_NORMS:-bn_naive,ln}
fi
SEEDS=${SEEDS:-0,1,2,3,4}
NORMS=${NORMS:-none,bn,brn,ln,gn,rms}
MLP_BATCHES=${MLP_BATCHES:-2,4,8,16,32,64,128}
CNN_BATCHES=${CNN_BATCHES:-2,8,32,128}
RNN_NORMS=${RNN_NORMS:-none,bn_naive,bn_masked,bn_recurrent,ln,ln_recurrent,rms}

if [ -e "$OUT" ]; then
  echo "reproduce.sh: $OUT exists; remove it or set OUT=<new dir>" >&2
  exit 2
fi
mkdir -p "$OUT"

# Settings every run shares: parallel jobs with one torch thread each (two 2-thread jobs on 2 cores
# oversubscribe), no live progress bars (the jobs would interleave them), a 2k validation split and
# test batches of 250 (a conv on 1 CPU thread runs ~1.5x faster at 250 than at 1000).
COMMON=(hydra.launcher.n_jobs="$JOBS" threads=1 progress=false data.val_size=2000 eval_batch_size=250
        "pack.seeds=[$SEEDS]")

study() {  # study NAME OVERRIDES...: one sweep, timed
  local name=$1; shift
  local start=$SECONDS
  "$PY" -m normbench train -m "$@" "${COMMON[@]}" hydra.sweep.dir="$OUT/$name"
  echo "$name: $((SECONDS - start)) s" | tee -a "$OUT/timing.txt"
}

study small_batch/mlp experiment=small_batch model=mlp norm="$NORMS" batch_size="$MLP_BATCHES" \
  epochs=1 data.subset=20000
study small_batch/cnn experiment=small_batch model=cnn "model.channels=[16,32]" model.hidden=128 norm="$NORMS" \
  batch_size="$CNN_BATCHES" epochs=1 data.subset=20000
study variable_length experiment=variable_length rnn_norm="$RNN_NORMS" epochs=2

"$PY" -m normbench summarize "$OUT/small_batch"
"$PY" -m normbench summarize "$OUT/variable_length"
echo "total: $SECONDS s on $(nproc) cores, $JOBS jobs at once" | tee -a "$OUT/timing.txt"
