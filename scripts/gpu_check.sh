#!/usr/bin/env bash
# The GPU measurements of docs/performance.md, for a machine with a CUDA GPU. From the repository root:
#
#   bash scripts/gpu_check.sh                # ~8 min on one GPU; results in $OUT or outputs/gpu_check
#   FULL=1 bash scripts/gpu_check.sh         # the whole small-batch study (hours at batch 2; see below)
#
# Needs: torch with CUDA, this package's dependencies (pip install -e .), and FashionMNIST where
# data.root finds it. On a machine without network, bring the 4 files along first, e.g.
#   mkdir -p data/FashionMNIST/raw && cp /usr/share/datasets/fashion-mnist/*.gz data/FashionMNIST/raw/
# (30 MB; with the device tool: carry=["data"]).
#
# Stages, each under its own time limit so one slow stage cannot eat the others' time:
#   1. the engine tests, the CUDA one included (AMP + compile + cudnn.benchmark on a small CNN);
#   2. time to 92% test accuracy, default CNN with BN, batch 64: fp32, bf16 autocast, bf16 + compile;
#   3. `normbench bench` on the GPU: runner vs hand-written loop, norms, recurrent cells;
#   4. `normbench bench --sections packed` on the GPU: S = 1, 5, 16 packed members vs S separate runs
#      (the target: S=16 at batch 2 >= 10x the separate runs' throughput);
#   5. the small-batch study's wall time: one seed, batch sizes 8..128, 1 epoch, unless FULL=1;
# then one table ($OUT/gpu_check.md): the packed steps, the time to accuracy, the study's wall time, and
# the packing limits the bench measured ($OUT/limits.json: normbench/pack/limits.json with its "cuda" entry
# filled in; copy it over that file and `pack.mode=auto` on CUDA packs where packing measured faster,
# pack/plan.py). Without a GPU it says so and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${OUT:-outputs/gpu_check}
ROOT=${NORMBENCH_DATA:-./data}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

$PY - 2>/dev/null <<'EOF' || { echo "gpu_check: no usable CUDA GPU here; nothing measured (exit 0)"; exit 0; }
import torch
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, bf16: {torch.cuda.is_bf16_supported()}")
EOF
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"

stage() {  # stage NAME SECONDS COMMAND...: run, log, time it; a failure or timeout does not stop the rest
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s): $*"
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $((SECONDS - start))s" | tee -a "$OUT/summary.txt"
  tail -n 5 "$OUT/$name.log"
}

stage tests 240 $PY -m pytest -q tests/test_engine.py -m "not slow"

for variant in fp32 amp amp_compile; do
  case $variant in fp32) flags="" ;; amp) flags="--amp" ;; amp_compile) flags="--amp --compile" ;; esac
  stage "tta_$variant" 150 sh -c "$PY scripts/time_to_accuracy.py --device cuda --data-root $ROOT $flags > $OUT/tta_$variant.json"
done

stage bench 240 $PY -m normbench bench --device cuda --sections loop,norms,cells --rounds 5 --seconds 0.1 \
  --data-root "$ROOT" --out "$OUT/bench"

stage bench_packed 300 $PY -m normbench bench --device cuda --sections packed --rounds 5 --seconds 0.1 \
  --data-root "$ROOT" --out "$OUT/bench_packed"

if [ -f normbench/configs/experiment/small_batch.yaml ]; then
  if [ "${FULL:-0}" = 1 ]; then
    study=(experiment=small_batch)
  else
    study=(experiment=small_batch "pack.seeds=[0]" pack.lrs=null lr=0.05 hydra.sweeper.params.batch_size=8,32,128 epochs=1)
  fi
  # One GPU, 16 CPU cores: 8 jobs at once share the GPU; the study's runs are small.
  stage small_batch 420 $PY -m normbench train -m "${study[@]}" device=cuda data.root="$ROOT" \
    hydra.launcher.n_jobs=8 hydra.sweep.dir="$OUT/small_batch"
else
  echo "small_batch: skipped, normbench/configs/experiment/small_batch.yaml is not on this branch" | tee -a "$OUT/summary.txt"
fi

$PY - "$OUT" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for f in sorted(out.glob("tta_*.json")):
    lines = [l for l in f.read_text().splitlines() if l.startswith("{")]
    if lines:
        r = json.loads(lines[-1])
        at = r["at"]
        print(f"{f.stem}: " + (f"{r['target']:.0%} test accuracy at epoch {at['epoch']}, {at['train_s']:.1f} s of "
              f"training, {at['wall_s']:.1f} s wall" if at else f"target not reached in {len(r['epochs'])} epochs"))
EOF
$PY - "$OUT" <<'EOF'
import json, pathlib, sys
from normbench.bench.packed import derive_limits, with_limits
out = pathlib.Path(sys.argv[1])
lines = ["# gpu_check", "", "| what | figure |", "|---|---|"]
bench = out / "bench_packed" / "bench.json"
if bench.exists():
    rows = json.loads(bench.read_text())["packed"]
    for r in rows:
        if r["batch_size"] == 2:
            lines.append(f"| {r['model']}+{r['norm']} batch 2, S={r['members']}: packed vs separate | "
                         f"{r['speedup']['median']:.2f}x ({r['packed_ms']:.2f} vs {r['separate_ms']:.2f} ms) |")
    limits = derive_limits(rows)
    (out / "limits.json").write_text(with_limits("cuda", limits))  # copy over normbench/pack/limits.json
    lines.append(f"| packing limits (limits.json, \"cuda\") | {limits} |")
for f in sorted(out.glob("tta_*.json")):
    found = [json.loads(l) for l in f.read_text().splitlines() if l.startswith("{")]
    if found and found[-1]["at"]:
        lines.append(f"| time to {found[-1]['target']:.0%}, {f.stem[4:]} | {found[-1]['at']['wall_s']:.1f} s |")
for line in (out / "summary.txt").read_text().splitlines():
    if line.startswith("small_batch:"):
        lines.append(f"| small-batch study | {line.split(': ', 1)[1]} |")
(out / "gpu_check.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
cat "$OUT/summary.txt"
