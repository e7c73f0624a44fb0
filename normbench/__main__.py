"""`python -m normbench ...` is the `normbench` command."""

from normbench.cli import entry

entry()
