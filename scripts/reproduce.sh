#!/usr/bin/env bash
# Reproduce everything the README and docs/results show: every shipped study at its laptop size through the
# declared protocol (docs/protocol.md), then the record checked into docs/results/ and the README's generated
# sections rewritten. The sizes live in normbench/study/plans/*.yaml, the protocol in
# normbench/configs/protocol.yaml; `normbench study all scale=laptop --plan` prints the plan and its estimate.
#
#   scripts/reproduce.sh                      # into outputs/reproduce/; run it again to resume
#   scripts/reproduce.sh /tmp/r scale=quick   # another folder, and any `normbench study` setting
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${1:-outputs/reproduce}
shift || true
"$PY" -m normbench study all scale=laptop "out=$OUT" "$@"
"$PY" scripts/readme_claims.py --record "$OUT"
