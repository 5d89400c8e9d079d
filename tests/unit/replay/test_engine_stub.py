"""The type stub replay/_engine.pyi says what the compiled module has: names and parameters."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from replay import _engine

STUB = Path(_engine.__file__).with_name("_engine.pyi")


def _stub_defs() -> dict[str, ast.AST]:
    tree = ast.parse(STUB.read_text())
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def _params(args: ast.arguments) -> list[str]:
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    return [n for n in names if n != "self"]


def test_every_public_name_is_in_the_stub_and_nothing_more():
    public = {n for n in dir(_engine) if not n.startswith("_")}
    assert set(_stub_defs()) == public


def test_parameters_match_the_compiled_signatures():
    defs = _stub_defs()
    for name, node in defs.items():
        obj = getattr(_engine, name)
        if isinstance(node, ast.ClassDef):
            init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
            compiled = list(inspect.signature(obj).parameters)
            assert _params(init.args) == compiled, name
            members = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} - {"__init__"}
            assert members <= set(dir(obj)), members - set(dir(obj))
        else:
            assert _params(node.args) == list(inspect.signature(obj).parameters), name
