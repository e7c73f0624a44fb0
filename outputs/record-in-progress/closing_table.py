"""Issue 58's closing table: each primary claim of the record checked into docs/results/ beside the previous
record's figure for the same test (docs/results/summary.json at ec198d7, the b82c61a record), matched by what
the claim tests (readme_claims._definition: study, sides, expectation, margin; a renamed claim keeps them).
The columns are the README table's own (readme_claims' helpers). From the checkout, after --record:

    python outputs/record-in-progress/closing_table.py [NEW_SUMMARY_JSON]
"""
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, "scripts")
import readme_claims as r  # noqa: E402
from normbench.summary import claims  # noqa: E402

new = json.loads(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results/summary.json").read_text())["claims"]
old = json.loads(subprocess.run(["git", "show", "ec198d7:docs/results/summary.json"], capture_output=True,
                                text=True, check=True).stdout)["claims"]
old_by = {r._definition(t["study"], t): t for t in old if "a" in t and "b" in t}


def figure(t, c):
    return f"{r._as_tested(t, c)} at {t.get('look_n') or t['n']} pairs" if t["n"] else "not tested"


print("| study | claim | model | verdict | a − b [95% CI] as tested | pairs | test | budget | previous record (b82c61a) |")
print("|---|---|---|---|---|---|---|---|---|")
for t in new:
    if t.get("role") != "primary":
        continue
    c = claims.parse([{k: t[k] for k in ("name", "a", "b", "expect", "margin", "metric") if t.get(k) is not None}],
                     t["study"], t["study"])[0]
    was = old_by.get(r._definition(t["study"], t))
    before = f"{r._verdict(was, was.get('role') or 'primary')}: {figure(was, c)}" if was else "not in that record"
    print(f"| {t['study']} | {t['name']} | {r._model(t)} | {r._verdict(t, 'primary')} | {r._as_tested(t, c)} | "
          f"{t.get('look_n') or t['n']} | {r._test(t)} | {r._budget(t)} | {before} |")
