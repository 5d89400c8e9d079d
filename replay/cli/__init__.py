"""The `replay` command line: the one place that composes the packages (lazily, per command).

The entry point is :func:`replay.cli.main.main` (`replay = "replay.cli.main:main"` in pyproject).
"""

__all__: list[str] = []
