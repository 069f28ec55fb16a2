"""``uncertain-agents check``: put posteriors through the sampler interface's rules (``check_posterior``)."""
from __future__ import annotations

from ..options import parse_key_value


def register(sub) -> None:
    p = sub.add_parser("check", help="check that posteriors keep the sampler interface's rules",
                       description="Run uncertain_agents.check_posterior on each named posterior (default: every "
                                   "registered one, plugins included) and print which rule, if any, it breaks. "
                                   "Exit code 1 if one breaks a rule (or, by default, a plugin fails to import).")
    p.add_argument("names", nargs="*", metavar="NAME", help="posterior names (default: all registered)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="method option passed to every named posterior, e.g. --option n_members=3 (repeatable)")
    p.add_argument("--likelihood", choices=("gaussian", "categorical", "both"), default="both",
                   help="the job(s) to check in: regression, classification or both (default)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu, cuda or cuda:1 (default: cpu)")
    p.set_defaults(func=run)


def run(args) -> int:
    from rich.console import Console
    from rich.markup import escape

    from ..checks import PosteriorCheckError, check_posterior
    from ..registry import POSTERIORS, PluginImportError
    from .common import Interrupted, check_device, titled_table

    device = check_device(args.device)
    options = dict(parse_key_value(text) for text in args.option)
    failed_plugins: dict[str, str] = {}
    names = list(dict.fromkeys(POSTERIORS.resolve(name) for name in args.names))
    if not args.names:
        try:
            names = POSTERIORS.names()
        except PluginImportError as err:  # every posterior that did register is still checked
            failed_plugins, names = err.failures, POSTERIORS.loaded_names()
    likelihoods = ("gaussian", "categorical") if args.likelihood == "both" else (args.likelihood,)
    table = titled_table(f"check_posterior ({', '.join(likelihoods)}; {device})")
    table.add_column("posterior")
    table.add_column("result")
    for plugin, message in failed_plugins.items():
        table.add_row(f"plugin {plugin}", f"[red]{escape(message)}[/red]")
    broken = len(failed_plugins)
    for name in names:
        try:
            check_posterior(name, device=device, likelihoods=likelihoods, **options)
        except KeyboardInterrupt:  # a check keeps nothing and resumes nothing (not the run-folder message)
            raise Interrupted(f"stopped at {name}; check wrote nothing") from None
        except PosteriorCheckError as err:
            broken += 1
            table.add_row(name, f"[red]{escape(str(err))}[/red]")  # messages hold [n, D]-like text
        else:
            table.add_row(name, "[green]keeps every rule[/green]")
    Console().print(table)
    return 1 if broken else 0
