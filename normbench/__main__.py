"""`python -m normbench ...` is the `normbench` command."""

import sys

from normbench.cli import main

sys.exit(main())
