"""The `replay` command line: the one place that composes the packages (lazily, per command)."""

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from replay.cli.main import main as _main

    return _main(argv)
