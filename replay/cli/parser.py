"""The `replay` command's argument parser: argparse with our error format (one line on stderr,
exit 2) and no abbreviated flags."""

from __future__ import annotations

import argparse

__all__ = ["Parser"]


class Parser(argparse.ArgumentParser):
    """argparse with our error format (one line on stderr, exit 2) and no abbreviated flags."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")
