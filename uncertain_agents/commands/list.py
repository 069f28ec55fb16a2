"""``uncertain-agents list``: the registered posteriors and their options."""
from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("list", help="list the available posteriors and their options",
                       description="List every registered posterior (plugins included) with its aliases and the "
                                   "options it takes (give them as --option KEY=VALUE, or NAME:key=value for attack).")
    p.set_defaults(func=run)


def run(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..registry import POSTERIORS, method_options

    table = Table(title="posteriors")
    table.add_column("name")
    table.add_column("aliases")
    table.add_column("options")
    for name in POSTERIORS.names():
        table.add_row(name, ", ".join(POSTERIORS.aliases(name)), ", ".join(method_options(name)))
    Console().print(table)
    return 0
