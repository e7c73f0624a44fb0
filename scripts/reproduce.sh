#!/usr/bin/env bash
# Reproduce the tables and plots of the README and docs/regimes.md: the small-batch regime's two panels on
# the MLP, (a) ghost batches at a fixed SGD batch (with Batch Renorm's ablation) and (b) true small
# batches, each configuration at 5 seeds x 5 learning rates trained as one pack (docs/packing.md); the
# values-per-channel experiment on the CNN (5 seeds, one lr); the variable-length study on the RNN (5 seeds
# x 3 learning rates); then `normbench summarize --select lr` on each and scripts/claims.py. Sized for 2 CPU cores (2 jobs at once, 1 torch thread each);
# every setting below is an override of the shipped experiments (normbench/configs/experiment/), which are
# the full-size studies.
#
#   scripts/reproduce.sh                                   # everything, into outputs/reproduce/
#   PYTHON=.venv/bin/python scripts/reproduce.sh           # with a given interpreter
#   QUICK=1 OUT=/tmp/pilot scripts/reproduce.sh            # a few-minute pilot: 2 seeds, 2 lrs, fewer cells
#   SEEDS=0,1,2,3,4,5,6,7,8,9 JOBS=8 scripts/reproduce.sh  # more seeds, on an 8-core machine
#
# Budgets (every table states its own): panel (b) and the CNN see 10,000 training samples at every batch
# size (1 epoch of a 10k subset: 5,000 steps at batch 2, 78 at 128); panel (a) trains 312 steps at batch 64
# (2 epochs of the same subset); the RNN 1 epoch of the full training set. The validation split (2k) and
# the subset are the same for every run (docs/regimes.md). The RNN's grid is 3 learning rates, not the
# shipped experiment's 5, and it trains 1 epoch of a 20k subset: its evaluation suite (every test length,
# padding, PreciseBN on stretched images) costs ~50 s per run for recurrent BN on one core. Timings go to
# $OUT/timing.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python}
OUT=${OUT:-outputs/reproduce}
JOBS=${JOBS:-2}
if [ -n "${QUICK:-}" ]; then
  SEEDS=${SEEDS:-0,1}; LRS=${LRS:-0.025,0.1}; RNN_LRS=${RNN_LRS:-1e-3,3e-3}; NORMS=${NORMS:-bn,ln}
  BATCHES=${BATCHES:-2,128}; GHOSTS=${GHOSTS:-2,64}; POSITIONS=${POSITIONS:-1,null}
  RNN_NORMS=${RNN_NORMS:-bn_recurrent,ln}; SUBSET=${SUBSET:-2000}; RNN_SUBSET=${RNN_SUBSET:-2000}
fi
SEEDS=${SEEDS:-0,1,2,3,4}
LRS=${LRS:-0.0125,0.025,0.05,0.1,0.2}  # SGD, at batch 64 (scaled linearly with the batch in panel (b))
RNN_LRS=${RNN_LRS:-3e-4,1e-3,3e-3}  # Adam
NORMS=${NORMS:-none,bn,brn,ln,gn,rms}
BATCHES=${BATCHES:-2,8,32,128}
GHOSTS=${GHOSTS:-2,4,8,16,64}
POSITIONS=${POSITIONS:-1,4,16,null}  # BN statistics over k random positions per image (null: all)
RNN_NORMS=${RNN_NORMS:-none,bn_naive,bn_masked,bn_recurrent,ln,ln_recurrent,rms}
SUBSET=${SUBSET:-10000}
RNN_SUBSET=${RNN_SUBSET:-20000}

if [ -e "$OUT" ]; then
  echo "reproduce.sh: $OUT exists; remove it or set OUT=<new dir>" >&2
  exit 2
fi
mkdir -p "$OUT"

# Settings every run shares: parallel jobs with one torch thread each (two 2-thread jobs on 2 cores
# oversubscribe), no live progress bars (the jobs would interleave them), a 2k validation split (what
# --select lr chooses on) and test batches of 250 (a conv on 1 CPU thread runs ~1.5x faster at 250 than
# at 1000).
COMMON=(hydra.launcher.n_jobs="$JOBS" threads=1 progress=false data.val_size=2000 eval_batch_size=250
        "pack.seeds=[$SEEDS]")
# Batch Renorm without its correction (r_max=1, d_max=0): BN computed by the BRN layer at BRN's settings.
# With BRN at BN's momentum it equals bn (tests/test_renorm.py), so it runs once, at the smallest ghost
# batch, as the check that BRN's gain over bn is its correction alone.
ABLATION=(norm=brn norm.r_max=1 norm.d_max=0)

study() {  # study NAME OVERRIDES...: one sweep, timed
  local name=$1; shift
  local start=$SECONDS
  "$PY" -m normbench train -m "$@" "${COMMON[@]}" hydra.sweep.dir="$OUT/$name"
  echo "$name: $((SECONDS - start)) s" | tee -a "$OUT/timing.txt"
}

# Panel (a): BN's batch alone varies (ghost batches of K in SGD batches of 64), and the batch-independent
# norms at the same budget.
GHOST=(experiment=ghost_batch epochs=2 data.subset="$SUBSET" "pack.lrs=[$LRS]")
study ghost_batch/bn "${GHOST[@]}" norm=bn,brn norm.ghost_batch="$GHOSTS"
study ghost_batch/brn_ablation "${GHOST[@]}" "${ABLATION[@]}" norm.ghost_batch="${GHOSTS%%,*}"
study ghost_batch/references "${GHOST[@]}" norm=none,ln,gn,rms norm.ghost_batch=null
# Panel (b): true small batches, the same 10k samples seen at every batch size.
SMALL=(experiment=small_batch model=mlp epochs=1 data.subset="$SUBSET" "pack.lrs=[$LRS]")
study small_batch/mlp "${SMALL[@]}" norm="$NORMS" batch_size="$BATCHES"
# Values per channel at a fixed batch: a conv BN whose statistics see batch x k positions. One lr (the
# CNN costs ~10x the MLP per sample on a CPU), the small-batch rule's 0.05 x 8/64.
study values_per_channel experiment=small_batch model=cnn "model.channels=[16,32]" model.hidden=128 norm=bn \
  batch_size=8 norm.positions="$POSITIONS" pack.lrs=null lr=0.05 epochs=1 data.subset="$SUBSET"
# The variable-length study.
study variable_length experiment=variable_length rnn_norm="$RNN_NORMS" epochs=1 data.subset="$RNN_SUBSET" \
  "pack.lrs=[$RNN_LRS]"

for name in ghost_batch small_batch variable_length; do
  "$PY" -m normbench summarize "$OUT/$name" --select lr
done
"$PY" -m normbench summarize "$OUT/values_per_channel"  # one lr: nothing to select
"$PY" scripts/claims.py "$OUT" | tee "$OUT/claims.md"
echo "total: $SECONDS s on $(nproc) cores, $JOBS jobs at once" | tee -a "$OUT/timing.txt"
