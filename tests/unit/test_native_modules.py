"""Every C module is built, sits in the package of the Python it serves, and agrees with its stub.

setup.py is read with :mod:`ast` (nothing is built here); the modules themselves are imported, as the tests that
use them do.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def _extensions() -> dict[str, list[str]]:
    """Module name -> sources, as setup.py declares them (through its ``_native`` helper)."""
    found: dict[str, list[str]] = {}
    for node in ast.walk(ast.parse((ROOT / "setup.py").read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_native":
            name, source = (ast.literal_eval(arg) for arg in node.args[:2])
            found[name] = [source]
    return found


def test_every_c_source_is_built_as_the_module_its_path_names() -> None:
    extensions = _extensions()
    sources = sorted(str(path.relative_to(ROOT)) for path in SRC.rglob("*.c"))
    assert sorted(source for built in extensions.values() for source in built) == sources
    for name, (source,) in extensions.items():
        assert source == "src/" + name.replace(".", "/") + ".c"
        assert (ROOT / source).with_suffix(".pyi").is_file(), f"{name} has no stub"


@pytest.mark.parametrize("name", sorted(_extensions()))
def test_a_native_module_exports_what_its_stub_declares(name: str) -> None:
    module = importlib.import_module(name)
    stub = ast.parse((SRC / (name.replace(".", "/") + ".pyi")).read_text())
    declared = {node.name for node in stub.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))} | {
        node.target.id for node in stub.body if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }
    assert declared
    exported = {attribute for attribute in vars(module) if not attribute.startswith("_")}
    assert declared == exported


def test_the_modules_over_atomic_buffers_take_the_one_atomic_buffer_type() -> None:
    from driver.concurrent._atomic import AtomicBuffer
    from driver.concurrent._watches import PositionWatch
    from driver.logbuffer._frames import scan_frames

    buffer = AtomicBuffer(bytearray(64))
    assert scan_frames(buffer, 0, 1) == (0, [])
    assert len(PositionWatch([(buffer, 0)])) == 1
    with pytest.raises(TypeError):
        scan_frames(memoryview(bytearray(64)), 0, 1)  # type: ignore[arg-type]
