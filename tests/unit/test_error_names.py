"""One error hierarchy per package, no two error classes of one name, and the old names still working.

The driver's errors that shared a name with the end point's were renamed with a ``Driver`` prefix (and the driver
client's ``Backoff`` became ``PollBackoff`` beside the end point's reconnect ``Backoff``); the old names resolve, with
a DeprecationWarning, so code written against them keeps running.
"""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict
from pathlib import Path

import pytest

import driver.errors
import endpoint
import endpoint.errors
from driver.client.aio import PollBackoff

SRC = Path(__file__).resolve().parents[2] / "src"


def _error_classes() -> dict[str, list[str]]:
    """Class name -> where each class of that name is defined, for every ``*Error``/``*Exception`` in ``src/``."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.name.endswith(("Error", "Exception")):
                found[node.name].append(f"{path.relative_to(SRC)}:{node.lineno}")
    return found


def test_no_two_error_classes_share_a_name() -> None:
    classes = _error_classes()
    assert {"DriverConfigurationError", "ConfigurationError", "ClientTimeoutError"} <= classes.keys()
    assert {name: where for name, where in classes.items() if len(where) > 1} == {}


def test_the_end_point_exports_its_own_errors_not_the_drivers() -> None:
    assert endpoint.ConfigurationError is endpoint.errors.ConfigurationError
    assert not issubclass(endpoint.ConfigurationError, driver.errors.DriverError)
    assert not issubclass(endpoint.ClientTimeoutError, driver.errors.DriverError)
    assert issubclass(driver.errors.DriverConfigurationError, ValueError)
    assert issubclass(driver.errors.DriverClientTimeoutError, driver.errors.DriverTimeoutError)


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        ("driver.errors", "ConfigurationError", driver.errors.DriverConfigurationError),
        ("driver.errors", "ClientTimeoutError", driver.errors.DriverClientTimeoutError),
        ("driver.client", "ClientError", driver.errors.DriverClientError),
        ("driver.client.conductor", "ClientError", driver.errors.DriverClientError),
        ("driver.client.aio", "Backoff", PollBackoff),
    ],
)
def test_an_old_name_still_resolves_with_a_deprecation_warning(module: str, old: str, new: type) -> None:
    with pytest.deprecated_call(match=new.__name__):
        assert getattr(importlib.import_module(module), old) is new
    namespace: dict[str, object] = {}
    with pytest.deprecated_call():
        exec(f"from {module} import {old}", namespace)  # the form user code has
    assert namespace[old] is new


def test_code_catching_an_old_name_still_catches_the_error() -> None:
    with pytest.deprecated_call():
        old = driver.errors.ConfigurationError
    with pytest.raises(old):
        raise driver.errors.DriverConfigurationError("aeron.mtu.length", 7, "a multiple of 32")


@pytest.mark.parametrize("module", ["driver.errors", "driver.client", "driver.client.conductor", "driver.client.aio"])
def test_an_unknown_name_is_still_an_attribute_error(module: str) -> None:
    imported = importlib.import_module(module)
    with pytest.raises(AttributeError, match="NoSuchError"):
        imported.NoSuchError  # noqa: B018 (the access is the test)
