"""Pytest fixtures for testing your own servers and clients (a plugin, loaded through the ``pytest11`` entry point).

Every test that uses them gets driver directories of its own (under ``/dev/shm`` where it can), a configuration
directory of its own (keys and pinned servers never touch the user's), servers on ports the driver picks
(``port=0``) and clients connected to them over UDP or IPC. At the end every end point the fixtures made is
closed, and the test fails when anything is left behind: an end point still open (one the test made by hand and
did not close), a driver directory still there, a task the test started still running, a global error listener
still registered, or an error an end point reported during the test that the test did not look at
(``endpoint_testbed.errors``).

The fixtures that start end points are async and run on pytest-asyncio (strict or auto mode): without it they fail
with a message saying so. Nothing here runs for tests that do not ask for these fixtures. See ``docs/testing.md``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs
import pytest

from endpoint.base import EndPoint
from endpoint.client import Client
from endpoint.config import ClientConfiguration, ServerConfiguration
from endpoint.connection.shell import Connection
from endpoint.handshake.keystore import CONFIG_DIR_ENV
from endpoint.listeners import _global_error_listeners
from endpoint.registry import SharedDriver, registry
from endpoint.server import Server

__all__ = ["EndpointTestbed", "RecordedError", "Transport"]

Transport = Literal["udp", "ipc"]
"""``udp``: the client has a driver of its own and reaches the server over UDP on loopback; ``ipc``: it shares
the server's driver directory and talks over shared memory."""

ServerT = TypeVar("ServerT", bound=Server)
ClientT = TypeVar("ClientT", bound=Client)
EndPointT = TypeVar("EndPointT", bound=EndPoint[Any])

_TASK_GRACE_S = 2.0
"""How long teardown lets the tasks the test started finish (an end point's poller ends after its last end point)."""
_CALL_REPORT = pytest.StashKey[pytest.TestReport]()
_ASYNC_NEEDED = (
    "the endpoint fixtures are async and run on pytest-asyncio: install it (pip install pytest-asyncio) and mark "
    "the test async (asyncio_mode = auto, or @pytest.mark.asyncio); see docs/testing.md"
)


@attrs.frozen
class RecordedError:
    """An error an end point the testbed made reported to its ``on_error`` listeners."""

    endpoint: EndPoint[Any]
    connection: Connection | None
    error: BaseException


class EndpointTestbed:
    """What one test's end points share: driver directories, the end points made so far, what was left behind.

    ``start_server`` and ``connect_client`` are the factories; everything they make (and whatever :meth:`track`
    is given) is closed at the end of the test, clients first. ``timeout`` bounds each start, connect and close.
    """

    def __init__(self, aeron_dir: Path, *, timeout: float = 30.0) -> None:
        self.aeron_dir = aeron_dir
        """The servers' driver directory (IPC clients share it)."""
        self.udp_client_dir = aeron_dir.with_name(aeron_dir.name + "-udp")
        """The UDP clients' driver directory: another driver, as a remote client would have."""
        self.timeout = timeout
        self.errors: list[RecordedError] = []
        """Errors the end points reported during the test. The test fails at its end if any are left here: a test
        that provokes errors on purpose checks them and clears the list."""
        self._endpoints: list[EndPoint[Any]] = []
        self._recording = True

    # ------------------------------------------------------------------ configurations

    def server_config(self, base: ServerConfiguration | None = None, **changes: Any) -> ServerConfiguration:
        """``base`` (or the defaults) on this test's driver directory and on a port the driver picks (``port=0``);
        ``changes`` are applied last (``port=4000`` asks for that port)."""
        settings: dict[str, Any] = {"aeron_dir": self.aeron_dir, "unique_aeron_dir": False, "port": 0}
        settings.update(changes)
        return attrs.evolve(base if base is not None else ServerConfiguration(), **settings)

    def client_config(
        self, base: ClientConfiguration | None = None, *, transport: Transport = "udp", **changes: Any
    ) -> ClientConfiguration:
        """``base`` (or the defaults) set up for ``transport``; ``changes`` are applied last."""
        if transport not in ("udp", "ipc"):
            raise ValueError(f"transport={transport!r} is not allowed: 'udp' or 'ipc'")
        settings: dict[str, Any] = {
            "aeron_dir": self.aeron_dir if transport == "ipc" else self.udp_client_dir,
            "unique_aeron_dir": False,
            "prefer_ipc": transport == "ipc",
        }
        settings.update(changes)
        return attrs.evolve(base if base is not None else ClientConfiguration(), **settings)

    # ------------------------------------------------------------------ factories

    async def start_server(
        self,
        config: ServerConfiguration | None = None,
        *,
        build: Callable[[ServerConfiguration], ServerT] = Server,  # type: ignore[assignment]
        **changes: Any,
    ) -> ServerT:
        """A bound server made by ``build`` (your application's own factory, say, which registers its listeners)
        from :meth:`server_config` of ``config`` and ``changes``; its port is ``server.port``."""
        server = self.track(build(self.server_config(config, **changes)))
        async with asyncio.timeout(self.timeout):
            await server.bind()
        return server

    async def connect_client(
        self,
        server: Server,
        config: ClientConfiguration | None = None,
        *,
        transport: Transport = "udp",
        build: Callable[[ClientConfiguration], ClientT] = Client,  # type: ignore[assignment]
        **changes: Any,
    ) -> ClientT:
        """A client made by ``build`` from :meth:`client_config`, connected to ``server`` over ``transport``
        (``client.connection`` is the connection)."""
        client = self.track(build(self.client_config(config, transport=transport, **changes)))
        host = server.config.listen_address
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1" if host == "0.0.0.0" else "::1"
        async with asyncio.timeout(self.timeout):
            await client.connect(host, server.port)
        return client

    def track(self, endpoint: EndPointT) -> EndPointT:
        """Close ``endpoint`` at the end of the test (and record its errors, see :attr:`errors`)."""
        if endpoint not in self._endpoints:
            self._endpoints.append(endpoint)

            def record(connection: Connection | None, error: BaseException) -> None:
                if self._recording:
                    self.errors.append(RecordedError(endpoint, connection, error))

            endpoint.on_error(record)
        return endpoint

    # ------------------------------------------------------------------ the end

    async def close(self) -> None:
        """Close every end point made or tracked (clients first, then the rest, newest first); each is closed
        whatever happens to the others, and the first failure is raised at the end."""
        failures = await self._close_all()
        if failures:
            raise failures[0][1]

    async def _close_all(self) -> list[tuple[EndPoint[Any], Exception]]:
        self._recording = False
        endpoints = sorted(reversed(self._endpoints), key=lambda e: not isinstance(e, Client))
        self._endpoints.clear()
        failures: list[tuple[EndPoint[Any], Exception]] = []
        for endpoint in endpoints:
            try:
                async with asyncio.timeout(self.timeout):
                    await endpoint.close()
            except Exception as exc:
                failures.append((endpoint, exc))
        return failures


class _Leftovers:
    """What existed when a test started, to tell at its end what it left behind (and clean that up)."""

    def __init__(self, directories: tuple[Path, ...]) -> None:
        self.directories = directories
        self.drivers = {id(d) for d in registry.active()}
        self.global_listeners = list(_global_error_listeners)
        self.tasks = asyncio.all_tasks()

    async def collect(self, testbed: EndpointTestbed) -> list[str]:
        """Everything left behind, each cleaned up once reported."""
        problems = [
            f"an error reported by the {_describe(e.endpoint)}{f' on {e.connection!r}' if e.connection else ''} that "
            f"the test did not check (clear endpoint_testbed.errors after checking them): {e.error!r}"
            for e in testbed.errors
        ]
        problems += [f"closing the {_describe(e)} failed: {exc!r}" for e, exc in await testbed._close_all()]
        for shared in self._new_drivers():
            for user in list(shared.users):
                problems.append(f"the {_describe(user)} on {shared.aeron_dir} was not closed")
                try:
                    if not isinstance(user, EndPoint):
                        raise TypeError(f"{user!r} is not an end point")
                    async with asyncio.timeout(testbed.timeout):
                        await user.close()
                except Exception:  # it goes anyway: its driver is stopped under it
                    await asyncio.to_thread(registry.release_blocking, shared, user)
        problems += await self._left_tasks()
        added = [listener for listener in _global_error_listeners if listener not in self.global_listeners]
        for listener in added:
            problems.append(f"global error listener {listener!r} is still registered")
            _global_error_listeners.remove(listener)
        problems += _remove_directories(self.directories)
        return problems

    def _new_drivers(self) -> list[SharedDriver]:
        mine = {str(path) for path in self.directories}
        return [
            d
            for d in registry.active()
            if id(d) not in self.drivers or str(d.aeron_dir) in mine or str(d.base_dir) in mine
        ]

    async def _left_tasks(self) -> list[str]:
        current = asyncio.current_task()
        running = [t for t in asyncio.all_tasks() if t not in self.tasks and t is not current and not t.done()]
        if not running:
            return []
        _, still = await asyncio.wait(running, timeout=_TASK_GRACE_S)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still, timeout=_TASK_GRACE_S)
        return [f"task {task.get_name()!r} ({task.get_coro()!r}) was still running" for task in still]


def _describe(endpoint: object) -> str:
    """``Server on port 41234``, ``Client of 127.0.0.1:41234``: which end point, in words."""
    if isinstance(endpoint, Server):
        port = endpoint._port or endpoint.config.port
        return f"{type(endpoint).__name__} on port {port}" if port else f"{type(endpoint).__name__} (not bound)"
    if isinstance(endpoint, Client):
        target = endpoint._target
        return f"{type(endpoint).__name__} of {target[0]}:{target[1]}" if target else type(endpoint).__name__
    return repr(endpoint)


def _remove_directories(directories: tuple[Path, ...]) -> list[str]:
    """Directories still there (a driver not stopped), removed."""
    problems = []
    for path in directories:
        if path.exists():
            problems.append(f"driver directory {path} is still there (a driver still running?)")
            shutil.rmtree(path, ignore_errors=True)
    return problems


def _shm_base() -> Path:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return Path(tempfile.gettempdir())


def _test_failed(request: pytest.FixtureRequest) -> bool:
    report = request.node.stash.get(_CALL_REPORT, None)
    return report is not None and report.failed


def _fail_unless_failed(request: pytest.FixtureRequest, problems: list[str], what: str) -> None:
    """Fail teardown with ``problems``; a test that failed already is not told again (its leftovers are
    likely that failure's)."""
    if problems and not _test_failed(request):
        pytest.fail(f"{what} left behind:\n  - " + "\n  - ".join(problems), pytrace=False)


# ---------------------------------------------------------------------- hooks


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each test's call report, so teardown knows whether the test failed already."""
    report = yield
    if report.when == "call":
        item.stash[_CALL_REPORT] = report
    return report


def pytest_configure(config: pytest.Config) -> None:
    """The async fixtures when pytest-asyncio is there to run them, else stand-ins that say it is needed."""
    plugins = config.pluginmanager
    # "asyncio" when loaded through its entry point; its module's name when loaded with -p (autoload disabled).
    active = plugins.has_plugin("asyncio") or plugins.has_plugin("pytest_asyncio.plugin")
    fixtures = _async_fixtures() if active else _WithoutAsyncio()
    config.pluginmanager.register(fixtures, "endpoint-async-fixtures")


# ---------------------------------------------------------------------- fixtures every setup has


@pytest.fixture
def endpoint_aeron_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A unique driver directory for this test (not created: a driver creates it), removed afterwards; the test
    fails if a driver still holds it at the end."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:40]
    path = _shm_base() / f"endpoint-test-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield path
    problems = []
    for shared in registry.active():
        if shared.aeron_dir == path or shared.base_dir == path:
            for user in list(shared.users):
                problems.append(f"the {_describe(user)} on {path} was not closed")
                registry.release_blocking(shared, user)
    problems += _remove_directories((path,))
    _fail_unless_failed(request, problems, "endpoint_aeron_dir")


@pytest.fixture
def endpoint_transport() -> Transport:
    """How ``endpoint_client`` reaches the server: ``udp``; parametrize to change it, e.g.
    ``@pytest.mark.parametrize("endpoint_transport", ["udp", "ipc"])``."""
    return "udp"


@pytest.fixture
def _endpoint_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Server keys and pinned server keys go to this test's own directory, never the user's."""
    directory = tmp_path / "endpoint-config"
    monkeypatch.setenv(CONFIG_DIR_ENV, str(directory))
    return directory


@pytest.fixture
def endpoint_server_config(endpoint_testbed: EndpointTestbed) -> ServerConfiguration:
    """The configuration ``endpoint_server`` starts with; override it to add your serialization and settings
    (``endpoint_testbed.server_config(...)`` keeps the test's directory and ``port=0``)."""
    return endpoint_testbed.server_config()


@pytest.fixture
def endpoint_client_config(endpoint_testbed: EndpointTestbed, endpoint_transport: Transport) -> ClientConfiguration:
    """The configuration ``endpoint_client`` connects with; override it as ``endpoint_server_config``."""
    return endpoint_testbed.client_config(transport=endpoint_transport)


# ---------------------------------------------------------------------- async fixtures


def _async_fixtures() -> object:
    """The async fixtures (pytest-asyncio is imported only when it is active: this module imports without it)."""
    import pytest_asyncio

    class AsyncFixtures:
        @pytest_asyncio.fixture
        async def endpoint_testbed(
            self, request: pytest.FixtureRequest, endpoint_aeron_dir: Path, _endpoint_config_dir: Path
        ) -> AsyncIterator[EndpointTestbed]:
            """Factories of servers and clients for this test, closed at its end; fails the test if anything is
            left behind (see :mod:`endpoint.testing`)."""
            testbed = EndpointTestbed(endpoint_aeron_dir)
            leftovers = _Leftovers((endpoint_aeron_dir, testbed.udp_client_dir))
            yield testbed
            _fail_unless_failed(request, await leftovers.collect(testbed), "the test")

        @pytest_asyncio.fixture
        async def endpoint_server(
            self, endpoint_testbed: EndpointTestbed, endpoint_server_config: ServerConfiguration
        ) -> Server:
            """A bound server on a port the driver picked (``endpoint_server.port``)."""
            return await endpoint_testbed.start_server(endpoint_server_config)

        @pytest_asyncio.fixture
        async def endpoint_client(
            self,
            endpoint_testbed: EndpointTestbed,
            endpoint_server: Server,
            endpoint_client_config: ClientConfiguration,
            endpoint_transport: Transport,
        ) -> Client:
            """A client connected to ``endpoint_server`` over ``endpoint_transport``."""
            return await endpoint_testbed.connect_client(
                endpoint_server, endpoint_client_config, transport=endpoint_transport
            )

    return AsyncFixtures()


class _WithoutAsyncio:
    """Registered when pytest-asyncio is not active: the async fixtures say what they need."""

    @pytest.fixture
    def endpoint_testbed(self) -> EndpointTestbed:
        pytest.fail(_ASYNC_NEEDED, pytrace=False)

    @pytest.fixture
    def endpoint_server(self) -> Server:
        pytest.fail(_ASYNC_NEEDED, pytrace=False)

    @pytest.fixture
    def endpoint_client(self) -> Client:
        pytest.fail(_ASYNC_NEEDED, pytrace=False)
