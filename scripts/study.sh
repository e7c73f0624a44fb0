# Sourced by scripts/reproduce.sh and scripts/headline_seeds.sh (it runs nothing itself):
#
#   sweep NAME OVERRIDES...   one timed `normbench train -m` sweep into $OUT/NAME, with $PY
#
# Its time goes to $OUT/timing.txt as "NAME: N s". ONLY="a b" runs just the studies named there. Under
# RESUME=1 a study that timing.txt lists is done and skipped, and one cut short (its folder exists, its
# time does not) continues: `resume=true` on the same sweep keeps its finished runs as they are and resumes
# the others from their last checkpoint (the runner refuses a run of other overrides in the same folder).
sweep() {
  local name=$1; shift
  if [ -n "${RESUME:-}" ] && grep -q "^$name: " "$OUT/timing.txt" 2>/dev/null; then
    echo "$name: done, skipped (RESUME=1)"; return
  fi
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then
    echo "$name: not in ONLY, skipped"; return
  fi
  local again=() note=""
  if [ -e "$OUT/$name" ]; then
    again=(resume=true) note=" (continued: this invocation's time)"
    echo "$name: cut short before; continuing it with resume=true"
  fi
  local start=$SECONDS
  "$PY" -m normbench train -m "$@" "${again[@]}" hydra.sweep.dir="$OUT/$name"
  echo "$name: $((SECONDS - start)) s$note" | tee -a "$OUT/timing.txt"
}
