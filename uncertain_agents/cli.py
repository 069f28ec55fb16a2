"""The ``uncertain-agents`` console script.

Each sub-command lives in its own module of :mod:`uncertain_agents.commands` and
exposes ``register(subparsers)``, which adds a parser whose ``func`` default runs it.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")  # foolbox imports GitPython


def build_parser() -> argparse.ArgumentParser:
    from . import __version__, commands

    parser = argparse.ArgumentParser(
        prog="uncertain-agents",
        description="Bayesian neural-network posteriors for bandits, adversarial detection and regression.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code.

    Every library error becomes one line on stderr: bad arguments, data or files, or a posterior
    plugin that fails to import (naming it; commands that need no missing name still run) exit 2;
    a diverged training (with a hint to lower ``--lr``) or another runtime error (e.g. from
    CUDA) exits 1; Ctrl-C exits 130. Finished units stay in the run folder, and running the
    same command again resumes. ``UNCERTAIN_AGENTS_DEBUG=1`` shows the full traceback instead.
    """
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    _check_leading_option(parser, argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if os.environ.get("UNCERTAIN_AGENTS_DEBUG"):
        return int(args.func(args) or 0)
    from .commands.common import Interrupted
    from .posteriors.training import TrainingDivergedError
    from .registry import PluginImportError

    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as err:
        if isinstance(err, Interrupted):  # the command's own message (bench, check: nothing kept)
            _error(f"interrupted — {err}", tag="stopped")
            return 130
        kept = "finished cells are kept in the grid folder" if getattr(args, "command", None) == "grid" else \
            "finished units are kept in the run folder"
        _error(f"interrupted — {kept}; run the same command again to resume", tag="stopped")
        return 130
    except TrainingDivergedError as err:
        _error(f"{err} — finished units are kept in the run folder")
        return 1
    except PluginImportError as err:  # one line naming each broken plugin (registry.import_posterior_plugins)
        _error(str(err))
        return 2
    except (ValueError, TypeError, KeyError) as err:
        _error(str(err) if not isinstance(err, KeyError) else f"missing key {err}")
        return 2
    except OSError as err:  # FileNotFoundError included: a missing input, or a file that cannot be written
        _error(f"{err.strerror or err}" + (f": {err.filename}" if getattr(err, "filename", None) else ""))
        return 2
    except RuntimeError as err:
        _error(str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__)
        return 1


def _check_leading_option(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A sub-command's option given before the command (``--epochs 3 regress``) is named,
    instead of argparse taking its value for the command."""
    if argv and argv[0].startswith("-") and argv[0].split("=")[0] not in ("-h", "--help", "--version"):
        parser.error(f"{argv[0]} is not an option of uncertain-agents itself; give it after the command "
                     f"(uncertain-agents COMMAND ... {argv[0]} ...)")


def _error(message: str, tag: str = "error") -> None:
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]{tag}:[/] {escape(message)}", soft_wrap=True)


if __name__ == "__main__":
    sys.exit(main())
