"""`normbench study`: shipped studies run through the declared protocol (docs/protocol.md).

    spec.py      a study as data: its experiment, sweeps and scales (normbench/study/plans/*.yaml)
    jobs.py      its jobs (one pack each), their folders and `normbench train` commands
    estimate.py  what they cost: a short calibration on this machine, projected
    rounds.py    the rounds: train, widen lr grids, look, train what is still undecided
    command.py   the command: the plan first, then the rounds, then the summaries
"""
