"""Every `replay` subcommand's --help renders (argparse %-formats help strings: a bare % in one
breaks that command's --help)."""

from __future__ import annotations

import argparse

from replay.cli.main import build_parser


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sub
                found.update({f"{name} {k}": v for k, v in _subcommands(sub).items()})
    return found


def test_every_subcommand_help_renders_and_names_its_flags():
    commands = _subcommands(build_parser())
    assert {"run", "sweep", "fidelity", "compare", "optimize", "capture"} <= set(commands)
    for name, sub in commands.items():
        text = sub.format_help()  # raises on a bad % in any help string
        flags = [o for a in sub._actions for o in a.option_strings if o.startswith("--") and o != "--help"]
        assert all(f in text for f in flags), name
