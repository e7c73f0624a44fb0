"""Each finished job's seconds beside the plan's estimate of it, for this record only: it started at
b82c61a, before study.json kept them (`job_seconds`, main since). The seconds are the sitting logs'
"[k/n] <study>/<job>: done in N s" lines, each under its round's heading; the estimate is the record's own
calibrations (calibration.json) projected by its own code, so run it from the record's checkout:

    cd /work/record && PYTHONPATH=$PWD python /work/main/outputs/record-in-progress/job_seconds.py \
        outputs/reproduce sitting-1.txt sitting-2.txt ... [--write]

Prints the jobs, then each study's seconds against the plan's; --write adds them to study.json as
`job_seconds` (key -> [seconds, planned]), for scripts/readme_claims.py --record: only once the record has
finished (b82c61a's code does not keep the key, so a sitting after it would drop them). A job a stopped
sitting left half-done counts only the seconds of the sitting that finished it (its "done in" line).
"""

import json
import re
import sys
from pathlib import Path

from normbench.study import jobs as joblist
from normbench.study import spec
from normbench.study.rounds import STATE, Study
from normbench.summary import protocol as protocols

out, logs = Path(sys.argv[1]), [Path(a) for a in sys.argv[2:] if a != "--write"]
state = json.loads((out / STATE).read_text())
if "--write" in sys.argv and not state.get("finished"):
    sys.exit(f"job_seconds.py: the study in {out} has not finished; --write after its last sitting")
study = Study(spec.resolve(state["studies"]), state["scale"], out, 2, None,
              say=lambda *a: print(*a, file=sys.stderr))  # a calibration it had to take would say so
by_name = {(j.study, j.name): j for j in study.universe()}

seconds: dict[str, float] = {}
for log in logs:
    index = None
    for line in log.read_text().splitlines():
        if m := re.match(r"round (\d+)(?:, widening .*)?: \d+ jobs? at seeds", line):
            index = int(m.group(1)) - 1
        elif (m := re.match(r"  \[\d+/\d+\] (\S+)/(\S+): done in (\d+) s", line)) and index is not None:
            job = by_name[(m.group(1), m.group(2))]
            seconds[str(joblist.directory(job, index, out).relative_to(out))] = float(m.group(3))

missing = sorted(set(state["done"]) - set(seconds))
if missing:
    sys.exit(f"job_seconds.py: no 'done in' line for {len(missing)} finished jobs, e.g. {missing[:3]}")
rows, per_study = {}, {}
for key in state["done"]:
    name, folder, job = key.split("/")
    index = int(folder.removeprefix("r")) - 1
    planned = study.estimate(by_name[(name, job)], list(protocols.round_seeds(study.proto, index)))
    rows[key] = [seconds[key], round(planned, 1)]
    s, p = per_study.get(name, (0.0, 0.0))
    per_study[name] = (s + seconds[key], p + planned)
    print(f"{key}: {seconds[key]:.0f} s, planned {planned:.0f} s")
for name, (s, p) in per_study.items():
    print(f"{name}: {s / 60:.1f} min of process time, planned {p / 60:.1f} min (measured/planned {s / p:.2f})")
if "--write" in sys.argv:
    state["job_seconds"] = rows
    (out / STATE).write_text(json.dumps(state, indent=1))
