"""A thin rich progress bar for ``fit`` that shows the running loss."""
from __future__ import annotations


class ProgressBar:
    """Use :meth:`create`, which returns ``None`` when the bar is disabled."""

    @classmethod
    def create(cls, enabled: bool, total: int, description: str) -> "ProgressBar | None":
        return cls(total, description) if enabled else None

    def __init__(self, total: int, description: str):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("loss {task.fields[loss]}"), TimeRemainingColumn(),
                                 transient=False)
        # "-" until the first loss is known: a "loss nan" on the first line read as a divergence
        self.task = self.progress.add_task(description, total=total, loss="-")
        self.progress.start()

    def update(self, completed: int, loss: float) -> None:
        self.progress.update(self.task, completed=completed, loss=f"{loss:.4g}")

    def close(self) -> None:
        self.progress.stop()
