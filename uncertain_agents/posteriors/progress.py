"""Progress output: the stderr console every progress bar, spinner and status line of the library
and the CLI is shown on (results stay on stdout, so they can be piped or redirected alone), and
the thin rich progress bar for ``fit`` that shows the running loss."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, ProgressColumn


def status_console() -> "Console":
    """A ``rich`` console on stderr, for progress bars, spinners and status lines (notes,
    ``resuming ...``): never mixed into a command's results on stdout."""
    from rich.console import Console

    return Console(stderr=True)


def progress_bar(*columns: "str | ProgressColumn", disable: bool = False, transient: bool = False) -> "Progress":
    """A ``rich`` progress bar with ``columns``, shown on :func:`status_console`.

    While it shows, what is written to stdout is printed above the bar only when stdout is a
    terminal too (so the bar is not torn); piped or redirected, it stays on stdout."""
    from rich.progress import Progress

    return Progress(*columns, console=status_console(), disable=disable, transient=transient,
                    redirect_stdout=_stdout_is_terminal())


def _stdout_is_terminal() -> bool:
    isatty = getattr(sys.stdout, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # a closed stream
        return False


class ProgressBar:
    """Use :meth:`create`, which returns ``None`` when the bar is disabled."""

    @classmethod
    def create(cls, enabled: bool, total: int, description: str) -> "ProgressBar | None":
        return cls(total, description) if enabled else None

    def __init__(self, total: int, description: str):
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn

        self.progress = progress_bar(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("loss {task.fields[loss]}"), TimeRemainingColumn())
        # "-" until the first loss is known: a "loss nan" on the first line read as a divergence
        self.task = self.progress.add_task(description, total=total, loss="-")
        self.progress.start()

    def update(self, completed: int, loss: float) -> None:
        self.progress.update(self.task, completed=completed, loss=f"{loss:.4g}")

    def close(self) -> None:
        self.progress.stop()
