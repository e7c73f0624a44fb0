#!/usr/bin/env bash
# The small-batch regime's headline claims at ten seeds (issue 22): BN's collapse at ghost batch 2, what it
# comes from (PreciseBN's re-estimated statistics, BN's eps) and Batch Renorm's gain (against BN, against its
# own ablation, and at momentum 0.01: how much of it is the averaging window), on the MLP under panel (a)'s
# budget: scripts/reproduce.sh's ghost_batch settings with SEEDS seeds instead of 5, and only the cells those
# claims compare. Then `normbench summarize --select lr` tests experiment=ghost_batch's declared claims on
# these runs as their own family (a claim whose cells are not here counts as untested, p = 1, in Holm).
#
#   scripts/headline_seeds.sh                      # into outputs/headline_seeds/, 1 job (one core)
#   JOBS=2 OUT=/tmp/h scripts/headline_seeds.sh    # both cores
#   SEEDS=0,1 SUBSET=2000 OUT=/tmp/h scripts/headline_seeds.sh   # a pilot
#   RESUME=1 scripts/headline_seeds.sh             # only the studies its timing.txt does not list (one cut
#                                                  # short continues from its checkpoints)
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python}
OUT=${OUT:-outputs/headline_seeds}
JOBS=${JOBS:-1}
SEEDS=${SEEDS:-0,1,2,3,4,5,6,7,8,9}
LRS=${LRS:-0.0125,0.025,0.05,0.1,0.2}
WIDEN=${WIDEN:-0.00625}  # the next lr below the grid, for the cells that choose its lower edge (below)
WIDEN2=${WIDEN2:-0.003125}  # and one more, for the cells that chose WIDEN
SUBSET=${SUBSET:-10000}
if [ -e "$OUT" ] && [ -z "${RESUME:-}" ]; then
  echo "headline_seeds.sh: $OUT exists; remove it, set OUT=<new dir>, or RESUME=1 to run only what it lacks" >&2
  exit 2
fi
mkdir -p "$OUT"

COMMON=(experiment=ghost_batch epochs=2 data.subset="$SUBSET" hydra.launcher.n_jobs="$JOBS" threads=1 progress=false
        data.val_size=2000 "pack.seeds=[$SEEDS]")
# [GRID=lrs] study NAME OVERRIDES...: one sweep over GRID (default LRS), timed (scripts/study.sh: skipped,
# or continued, under RESUME=1)
. scripts/study.sh
study() { local name=$1; shift; sweep "$name" "${COMMON[@]}" "pack.lrs=[${GRID:-$LRS}]" "$@"; }
study bn norm=bn,brn norm.ghost_batch=2
study bn64 norm=bn norm.ghost_batch=64
study brn_ablation norm=brn norm.r_max=1 norm.d_max=0 norm.ghost_batch=2
study references norm=gn norm.ghost_batch=null
study brn_window norm=brn norm.ghost_batch=2 norm.momentum=0.01
study eps norm=bn norm.ghost_batch=2 norm.eps=1e-1
# At ten seeds BN, BRN (and its ablation and window) at K = 2 and GN chose 0.0125, the grid's lower edge
# (summarize flags it): one lr further down for them, so no verdict rests on where the grid happened to end.
GRID=$WIDEN study widen_k2 norm=bn,brn norm.ghost_batch=2
GRID=$WIDEN study widen_ablation norm=brn norm.r_max=1 norm.d_max=0 norm.ghost_batch=2
GRID=$WIDEN study widen_window norm=brn norm.ghost_batch=2 norm.momentum=0.01
GRID=$WIDEN study widen_gn norm=gn norm.ghost_batch=null
# With 0.00625, BN at K = 2 chose it for 1 seed of 10 and BRN for all 10: one more step down for both (and
# there it stops: summarize's ⚑ says where a choice still sits at the edge).
GRID=$WIDEN2 study widen2_k2 norm=bn,brn norm.ghost_batch=2
rm -rf "$OUT/summary"
"$PY" -m normbench summarize "$OUT" --select lr --out "$OUT/summary"
echo "total: $SECONDS s, $JOBS jobs at once on $(nproc) cores" | tee -a "$OUT/timing.txt"
echo "SEEDS=$SEEDS SUBSET=$SUBSET LRS=$LRS WIDEN=$WIDEN WIDEN2=$WIDEN2 JOBS=$JOBS ${RESUME:+RESUME=1 }scripts/headline_seeds.sh (git $(git rev-parse --short HEAD))" \
  >> "$OUT/command.txt"
