"""The type stub replay/_engine.pyi says what the compiled module has: names and parameters."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from replay import _engine

STUB = Path(_engine.__file__).with_name("_engine.pyi")


def _stub_defs() -> dict[str, ast.AST]:
    """The stub's functions and classes, less its TypedDicts (the shapes of what the functions
    return: types only, not names of the compiled module)."""
    tree = ast.parse(STUB.read_text())
    typed: set[str] = set()
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and any(getattr(b, "id", "") in typed | {"TypedDict"} for b in n.bases):
            typed.add(n.name)
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name not in typed}


def test_the_typed_returns_name_what_the_runner_returns():
    """RunDefaults is run_defaults() to the key; Rows and RunOutput name every key run() returns
    (checked on the Rust source that builds them)."""
    tree = ast.parse(STUB.read_text())
    fields = {
        n.name: {a.target.id for a in n.body if isinstance(a, ast.AnnAssign)} for n in tree.body if isinstance(n, ast.ClassDef)
    }
    assert fields["RunDefaults"] == set(_engine.run_defaults())
    source = (Path(__file__).resolve().parents[3] / "rust" / "py" / "src" / "lib.rs").read_text()
    for key in fields["Rows"] | fields["RunOutput"] | fields["RunnerStats"]:
        assert f'set_item("{key}"' in source, key


def _params(args: ast.arguments) -> list[str]:
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    return [n for n in names if n != "self"]


def _stub_constants() -> dict[str, str]:
    """The stub's module-level constants (``NAME: type``) and their annotated types."""
    tree = ast.parse(STUB.read_text())
    return {
        n.target.id: ast.unparse(n.annotation)
        for n in tree.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }


def test_every_public_name_is_in_the_stub_and_nothing_more():
    public = {n for n in dir(_engine) if not n.startswith("_")}
    constants = _stub_constants()
    assert set(_stub_defs()) | set(constants) == public
    for name, kind in constants.items():
        assert type(getattr(_engine, name)).__name__ == kind, name


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
