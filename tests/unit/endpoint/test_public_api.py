"""The public surface of ``endpoint``: every public error importable from the package, and listener decorators
typed so that a type checker rejects a listener whose parameters do not accept what it will be given."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import endpoint

ROOT = Path(__file__).resolve().parents[3]
SNIPPETS = Path(__file__).with_name("typing_snippets")
OPTIONAL_SUBPACKAGES = ("endpoint.pipeline",)
"""The Spark pipeline is an optional extra with its own namespace (``endpoint.pipeline``) and its own errors."""
INTERNAL_ERRORS = {"endpoint.handshake.noise.NoiseError"}
"""Raised and caught inside the handshake; a user never sees one."""


def _core_modules() -> list[str]:
    names = ["endpoint"]
    for info in pkgutil.walk_packages(endpoint.__path__, prefix="endpoint."):
        if not info.name.startswith(OPTIONAL_SUBPACKAGES):
            names.append(info.name)
    return names


def _error_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_name in _core_modules():
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module_name
                and not name.startswith("_")
                and f"{module_name}.{name}" not in INTERNAL_ERRORS
            ):
                found[f"{module_name}.{name}"] = value
    return found


def test_every_public_error_of_the_package_is_importable_from_endpoint() -> None:
    errors = _error_classes()
    assert len(errors) >= 25, sorted(errors)  # the walk found the hierarchy
    missing = [path for path, cls in errors.items() if getattr(endpoint, cls.__name__, None) is not cls]
    assert not missing, f"not importable as endpoint.<Name>: {missing}"
    unlisted = [path for path, cls in errors.items() if cls.__name__ not in endpoint.__all__]
    assert not unlisted, f"missing from endpoint.__all__: {unlisted}"
    for name in ("RpcError", "RpcTimeoutError", "RemoteError", "StreamError", "StreamCancelledError"):
        assert f"endpoint.errors.{name}" in errors


def test_every_public_error_derives_from_endpoint_error() -> None:
    assert all(issubclass(cls, endpoint.EndpointError) for cls in _error_classes().values())


def test_every_name_in_all_exists() -> None:
    assert [name for name in endpoint.__all__ if not hasattr(endpoint, name)] == []


def _mypy_errors(tmp_path: Path, *files: Path) -> dict[str, list[int]]:
    """One strict mypy run, with the project's configuration, over copies of ``files``; error lines per file."""
    pytest.importorskip("mypy")
    work = tmp_path / "snippets"
    work.mkdir()
    for file in files:
        shutil.copy(file, work / file.name)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--strict",
            "--no-error-summary",
            *(str(work / file.name) for file in files),
        ],
        cwd=ROOT,  # the configuration's mypy_path ("src") is this tree's source
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    errors: dict[str, list[int]] = {file.name: [] for file in files}
    for line in result.stdout.splitlines():
        match = re.match(r"(?:.*/)?([^/:]+\.py):(\d+): error:", line)
        assert match, f"mypy reported something outside the snippets: {line}"
        errors[match[1]].append(int(match[2]))
    return errors


def test_mypy_rejects_listeners_that_do_not_accept_what_they_are_given_and_accepts_those_that_do(
    tmp_path: Path,
) -> None:
    good, bad = SNIPPETS / "listeners_good.py", SNIPPETS / "listeners_bad.py"
    expected = [n for n, text in enumerate(bad.read_text().splitlines(), start=1) if "# rejected" in text]
    assert len(expected) == 6
    errors = _mypy_errors(tmp_path, good, bad)
    assert errors[good.name] == []
    assert sorted(set(errors[bad.name])) == expected


def test_the_tools_name_every_rejection_reason_and_handshake_drop_the_end_point_counts() -> None:
    """The tools (in the driver, which never imports the end points) spell the reasons out; they must agree."""
    import attrs

    from driver.tools.connections import HANDSHAKE_DROP_REASONS, REJECT_REASONS
    from endpoint.errors import RejectReason
    from endpoint.handshake.protocol import HandshakeStats

    assert tuple(reason.name.lower() for reason in RejectReason) == REJECT_REASONS
    drops = {f.name for f in attrs.fields(HandshakeStats)} - {"received", "challenged"}
    assert set(HANDSHAKE_DROP_REASONS) == drops
