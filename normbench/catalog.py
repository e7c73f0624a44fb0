"""`normbench norms`: the catalog as a rich table, or one norm's options and where it is not defined.

    normbench norms            # every norm: what it normalizes over, batch dependence, parameters, paper
    normbench norms gn         # gn's options with their defaults, and its layouts
    normbench norms check my_norm:ScaleNorm   # the catalog's contract on a norm, yours too (norm_check.py)
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from normbench import norms
from normbench.errors import UserError


def catalog_table() -> Table:
    table = Table(title="normbench norms", show_lines=False)
    table.add_column("name", style="bold", no_wrap=True)
    for col in ("full name", "statistics over", "batch-dependent", "learnable parameters", "layouts", "paper"):
        table.add_column(col, overflow="fold")
    for name in norms.names():
        spec = norms.get(name)
        full_name = spec.full_name + (" *" if spec.own_activation else "")
        table.add_row(name, full_name, spec.stats_over, "yes" if spec.batch_dependent else "no", spec.params,
                      ", ".join(spec.layouts), spec.paper)
    return table


def detail_table(name: str) -> Table:
    spec = norms.get(name)
    table = Table(title=f"{name}: {spec.full_name} ({spec.paper})")
    table.add_column("option (norm.<option>=...)")
    table.add_column("default")
    for option, default in spec.options().items():
        table.add_row(option, repr(default))
    for layout, why in spec.unsupported.items():
        table.add_row(f"[dim]not on {layout}[/]", why)
    return table


def main(argv: list[str], console: Console | None = None) -> int:
    # Piped output has no terminal width to fit; rich's 80 columns would fold every cell.
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    if argv and argv[0] == "check":
        from normbench.norm_check import main as check

        return check(argv[1:], say=console.print)
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        raise UserError("usage: normbench norms [NAME]", "run `normbench norms` for the whole catalog")
    console.print(detail_table(argv[0]) if argv else catalog_table())
    if not argv:
        ghosts = ", ".join(n for n in norms.names() if "ghost_batch" in norms.get(n).options())
        console.print("* includes its own activation (FRN's TLU, EvoNorm-S0's sigmoid gate).\n"
                      "layouts: flat (N, C) for MLPs, image (N, C, H, W) for CNNs, seq (N, T, C) for RNNs. "
                      f"norm.ghost_batch=K ({ghosts}): batch statistics per group of K samples. "
                      "`normbench norms NAME` lists a norm's options; `normbench norms check NAME|MODULE:NAME` "
                      "runs the catalog's contract on one (docs/your-question.md).")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
