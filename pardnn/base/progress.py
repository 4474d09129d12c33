"""Progress for long work: a spinner with the stage name and elapsed time on stderr.

rich draws it only on an interactive terminal (and erases it when the stage ends), so
piped output, logs and tests see nothing but the command's own lines.
"""

from contextlib import contextmanager

from rich.console import Console

_console = Console(stderr=True)


@contextmanager
def stage(message: str):
    """Show `message` with a spinner while the body runs."""
    with _console.status(message, spinner="dots"):
        yield


def quiet() -> None:
    """No spinner from here on: for a process working beside one that shows its own
    (pardnn.pipeline.lanes)."""
    _console.quiet = True
