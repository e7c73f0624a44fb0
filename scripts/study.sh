# Sourced by scripts/reproduce.sh and scripts/headline_seeds.sh (it runs nothing itself):
#
#   sweep NAME OVERRIDES...   one timed `normbench train -m` sweep into $OUT/NAME, with $PY
#
# Its time goes to $OUT/timing.txt as "NAME: N s", its overrides to $OUT/NAME/.overrides. ONLY="a b" runs
# just the studies named there. Under RESUME=1 a study that timing.txt lists is done and skipped, and one
# cut short (its folder there, its time not) continues: `resume=true` on the same sweep keeps its finished
# runs as they are and resumes the others from their last checkpoint. A study cut short under other
# overrides (another SEEDS, say) starts over instead, its runs moved to $OUT.interrupted/, out of what
# summarize reads.
sweep() {
  local name=$1; shift
  if [ -n "${RESUME:-}" ] && grep -q "^$name: " "$OUT/timing.txt" 2>/dev/null; then
    echo "$name: done, skipped (RESUME=1)"; return
  fi
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then
    echo "$name: not in ONLY, skipped"; return
  fi
  local dir="$OUT/$name" overrides again=() note=""
  overrides=$(printf '%s\n' "$@")
  if [ -e "$dir" ]; then
    if [ -n "${RESUME:-}" ] && [ "$(cat "$dir/.overrides" 2>/dev/null)" = "$overrides" ]; then
      again=(resume=true) note=" (continued: this invocation's time)"
      echo "$name: cut short before; continuing it with resume=true"
    else
      mkdir -p "$OUT.interrupted" && mv "$dir" "$OUT.interrupted/${name//\//_}.$(date +%s)"
      echo "$name: cut short before under other overrides; starting over (its runs are in $OUT.interrupted/)"
    fi
  fi
  mkdir -p "$dir" && printf '%s\n' "$overrides" > "$dir/.overrides"
  local start=$SECONDS
  "$PY" -m normbench train -m "$@" ${again[@]+"${again[@]}"} hydra.sweep.dir="$dir"
  echo "$name: $((SECONDS - start)) s$note" | tee -a "$OUT/timing.txt"
}
