"""The pytest plugin users test their own end points with (``endpoint.testing``), run as users run it: pytest
inside pytest (``pytester``), on real drivers, sockets and directories.

The inner runs use pytest-asyncio in strict mode (a plain user setup) unless a test says otherwise, and turn
warnings into errors, so an unclosed socket or file there fails them too.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import tomllib
from pathlib import Path

import pytest

import endpoint

SOURCE_ROOT = Path(endpoint.__file__).resolve().parents[1]
PYPROJECT = SOURCE_ROOT.parent / "pyproject.toml"

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""

MESSAGES = """
import asyncio

import attrs
import pytest

from endpoint import Client, ClientConfiguration, Connection, Serialization, Server, ServerConfiguration


@attrs.define
class Ping:
    n: int


@attrs.define
class Pong:
    n: int


def serialization() -> Serialization:
    ser = Serialization()
    ser.register(Ping, type_id=1)
    ser.register(Pong, type_id=2)
    return ser


def create_server(config: ServerConfiguration) -> Server:
    '''What an application's own server factory looks like: listeners registered before it binds.'''
    server = Server(config)

    @server.on_message(Ping)
    async def pong(connection: Connection, message: Ping) -> None:
        await connection.send(Pong(message.n + 1))

    return server


async def ping(client: Client, n: int) -> Pong:
    answers: asyncio.Queue[Pong] = asyncio.Queue()
    client.on_message(Pong, lambda connection, message: answers.put_nowait(message))
    await client.send(Ping(n))
    return await asyncio.wait_for(answers.get(), 10)
"""


def _plugin_args() -> list[str]:
    """``-p endpoint.testing`` unless the installed package already registers it (twice would be an error)."""
    installed = any(ep.value == "endpoint.testing" for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "endpoint.testing"]


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeini(INI)
    return pytester.runpytest_inprocess(*_plugin_args(), "-p", "no:cacheprovider", *args)


def test_ready_made_server_and_client_exchange_messages_over_udp_and_ipc(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(messages=MESSAGES)
    pytester.makepyfile(
        """
        import pytest

        from endpoint import Client, Connection, Server
        from messages import Ping, Pong, ping, serialization


        @pytest.fixture
        def endpoint_server_config(endpoint_testbed):
            return endpoint_testbed.server_config(serialization=serialization())


        @pytest.fixture
        def endpoint_client_config(endpoint_testbed, endpoint_transport):
            return endpoint_testbed.client_config(transport=endpoint_transport, serialization=serialization())


        @pytest.mark.asyncio
        @pytest.mark.parametrize("endpoint_transport", ["udp", "ipc"])
        async def test_exchange(endpoint_server: Server, endpoint_client: Client, endpoint_transport: str) -> None:
            @endpoint_server.on_message(Ping)
            async def pong(connection: Connection, message: Ping) -> None:
                await connection.send(Pong(message.n + 1))

            assert endpoint_server.config.port == 0
            assert endpoint_server.port > 0
            connection = endpoint_client.connection
            assert connection is not None
            assert connection.is_ipc is (endpoint_transport == "ipc")
            if endpoint_transport == "udp":
                assert connection.remote_address == f"127.0.0.1:{endpoint_server.port}"
            assert (await ping(endpoint_client, 41)).n == 42
        """
    )
    result = _run(pytester, "-v")
    result.assert_outcomes(passed=2)


def test_factories_start_servers_on_their_own_ports_and_connect_clients(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(messages=MESSAGES)
    pytester.makepyfile(
        """
        import pytest

        from endpoint import Client, Server
        from endpoint.testing import EndpointTestbed
        from messages import create_server, ping, serialization


        @pytest.mark.asyncio
        async def test_two_servers(endpoint_testbed: EndpointTestbed) -> None:
            first = await endpoint_testbed.start_server(serialization=serialization(), build=create_server)
            second = await endpoint_testbed.start_server(serialization=serialization(), build=create_server)
            assert isinstance(first, Server)
            assert 0 < first.port != second.port > 0
            for server in (first, second):
                for transport in ("udp", "ipc"):
                    client = await endpoint_testbed.connect_client(
                        server, transport=transport, serialization=serialization()
                    )
                    assert isinstance(client, Client)
                    assert (await ping(client, 41)).n == 42
            assert len(first.connections) == len(second.connections) == 2
            assert endpoint_testbed.aeron_dir.is_dir()
            assert endpoint_testbed.udp_client_dir.is_dir()


        @pytest.mark.asyncio
        async def test_an_ipc_only_server(endpoint_testbed: EndpointTestbed) -> None:
            server = await endpoint_testbed.start_server(
                serialization=serialization(), build=create_server, enable_udp=False
            )
            client = await endpoint_testbed.connect_client(server, transport="ipc", serialization=serialization())
            assert (await ping(client, 1)).n == 2
        """
    )
    result = _run(pytester)
    result.assert_outcomes(passed=2)


def test_a_test_that_leaves_things_behind_fails_and_the_next_starts_clean(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(messages=MESSAGES)
    pytester.makepyfile(
        """
        import asyncio

        import pytest

        from endpoint import Client, Server, ServerConfiguration, add_global_error_listener
        from endpoint.registry import registry
        from messages import create_server, serialization


        @pytest.mark.asyncio
        async def test_leaves_a_client_open(endpoint_testbed, endpoint_server) -> None:
            client = Client(endpoint_testbed.client_config())  # made by hand, never closed
            await client.connect("127.0.0.1", endpoint_server.port)


        @pytest.mark.asyncio
        async def test_leaves_a_task_running(endpoint_testbed) -> None:
            asyncio.get_running_loop().create_task(asyncio.sleep(60), name="forgotten")


        @pytest.mark.asyncio
        async def test_leaves_a_global_error_listener(endpoint_testbed) -> None:
            add_global_error_listener(lambda connection, error: None)


        @pytest.mark.asyncio
        async def test_ignores_an_error_an_end_point_reported(endpoint_testbed) -> None:
            server = await endpoint_testbed.start_server(serialization=serialization())

            @server.on_connect
            def broken(connection) -> None:
                raise RuntimeError("listener bug")

            await endpoint_testbed.connect_client(server, serialization=serialization())
            for _ in range(1000):
                if endpoint_testbed.errors:
                    break
                await asyncio.sleep(0.01)


        @pytest.mark.asyncio
        async def test_checks_the_errors_it_provoked(endpoint_testbed) -> None:
            server = await endpoint_testbed.start_server(serialization=serialization())

            @server.on_connect
            def broken(connection) -> None:
                raise RuntimeError("listener bug")

            await endpoint_testbed.connect_client(server, serialization=serialization())
            for _ in range(1000):
                if endpoint_testbed.errors:
                    break
                await asyncio.sleep(0.01)
            assert "listener bug" in str(endpoint_testbed.errors[0].error)
            endpoint_testbed.errors.clear()


        @pytest.mark.asyncio
        async def test_leaves_a_server_on_its_directory(endpoint_aeron_dir) -> None:
            server = create_server(ServerConfiguration(aeron_dir=endpoint_aeron_dir, port=0))
            await server.bind()


        @pytest.mark.asyncio
        async def test_fails_and_leaves_a_server_open(endpoint_aeron_dir) -> None:
            server = create_server(ServerConfiguration(aeron_dir=endpoint_aeron_dir, port=0))
            await server.bind()
            assert False, "the test's own failure"


        def test_next_starts_clean() -> None:
            assert registry.active() == []
        """
    )
    result = _run(pytester)
    result.assert_outcomes(passed=7, failed=1, errors=5)
    result.stdout.fnmatch_lines_random(
        [
            "*ERROR at teardown of test_leaves_a_client_open*",
            "*the Client of 127.0.0.1:* on *-udp was not closed*",
            "*ERROR at teardown of test_leaves_a_task_running*",
            "*task 'forgotten' * was still running*",
            "*ERROR at teardown of test_leaves_a_global_error_listener*",
            "*global error listener * is still registered*",
            "*ERROR at teardown of test_ignores_an_error_an_end_point_reported*",
            "*an error reported by the Server on port * that the test did not check*listener bug*",
            "*ERROR at teardown of test_leaves_a_server_on_its_directory*",
            "*the Server on port * on *test_leaves_a_server_on_its_directory* was not closed*",
        ]
    )
    # The failing test is reported once, for its own failure, not again for what it left open.
    result.stdout.no_fnmatch_line("*ERROR at teardown of test_fails_and_leaves_a_server_open*")
    result.stdout.fnmatch_lines(["*the test's own failure*"])


def test_auto_mode_needs_no_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(messages=MESSAGES)
    pytester.makepyfile(
        """
        from messages import create_server, ping, serialization


        async def test_auto(endpoint_testbed) -> None:
            server = await endpoint_testbed.start_server(serialization=serialization(), build=create_server)
            client = await endpoint_testbed.connect_client(server, serialization=serialization())
            assert (await ping(client, 1)).n == 2
        """
    )
    result = _run(pytester, "-o", "asyncio_mode=auto")
    result.assert_outcomes(passed=1)


def test_without_pytest_asyncio_the_fixtures_say_what_they_need(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_wants_a_server(endpoint_server) -> None:
            pass


        def test_a_directory_needs_no_loop(endpoint_aeron_dir) -> None:
            assert not endpoint_aeron_dir.exists()
        """
    )
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    result = pytester.runpytest_inprocess(*_plugin_args(), "-p", "no:cacheprovider", "-p", "no:asyncio")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*the endpoint fixtures are async and run on pytest-asyncio*"])


@pytest.mark.process
def test_a_suite_passes_in_parallel_workers(pytester: pytest.Pytester) -> None:
    """Under pytest-xdist each worker's fixtures make directories, keys and ports of their own (servers bind port
    0): two workers running servers and clients side by side over both transports pass as one process does."""
    pytester.makepyfile(messages=MESSAGES)
    suite = """
        import pytest

        from messages import create_server, ping, serialization


        @pytest.mark.asyncio
        @pytest.mark.parametrize("transport", ["udp", "ipc"])
        @pytest.mark.parametrize("n", range(3))
        async def test_exchange(endpoint_testbed, transport, n) -> None:
            server = await endpoint_testbed.start_server(serialization=serialization(), build=create_server)
            client = await endpoint_testbed.connect_client(server, transport=transport, serialization=serialization())
            assert (await ping(client, n)).n == n + 1
        """
    pytester.makepyfile(test_first=suite, test_second=suite)
    pytester.makeini(INI)
    result = pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider", "-n", "2", timeout=120)
    result.assert_outcomes(passed=12)
    result.stdout.fnmatch_lines(["*2 workers*"])


@pytest.mark.process
def test_the_plugin_loads_through_the_entry_point_pyproject_declares(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A distribution carrying the ``pytest11`` entry point of pyproject.toml makes pytest load the plugin with no
    ``-p`` (as ``pip install`` of the package does), under the name ``endpoint`` (``-p no:endpoint`` drops it)."""
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"]["pytest11"]
    assert declared == {"endpoint": "endpoint.testing"}
    site = pytester.mkdir("site")
    dist_info = site / "endpoint_entry_point_check-0.0.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: endpoint-entry-point-check\nVersion: 0.0.0\n")
    (dist_info / "entry_points.txt").write_text(
        "[pytest11]\n" + "".join(f"{name} = {module}\n" for name, module in declared.items())
    )
    pytester.makepyfile(messages=MESSAGES)
    pytester.makepyfile(
        """
        import pytest

        from messages import create_server, ping, serialization


        @pytest.mark.asyncio
        async def test_loaded(request, endpoint_testbed) -> None:
            assert request.config.pluginmanager.get_plugin("endpoint").__name__ == "endpoint.testing"
            server = await endpoint_testbed.start_server(serialization=serialization(), build=create_server)
            client = await endpoint_testbed.connect_client(server, serialization=serialization())
            assert (await ping(client, 1)).n == 2
        """
    )
    pytester.makeini(INI)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(SOURCE_ROOT)]))
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=1)
    dropped = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:endpoint", timeout=120)
    dropped.assert_outcomes(errors=1)
    dropped.stdout.fnmatch_lines(["*fixture 'endpoint_testbed' not found*"])


def test_the_examples_in_the_testing_guide_pass(pytester: pytest.Pytester) -> None:
    """docs/testing.md's files (code blocks starting ``# <name>.py``) as a user would save and run them."""
    guide = (SOURCE_ROOT.parent / "docs" / "testing.md").read_text()
    files = {}
    for block in re.findall(r"```python\n(.*?)```", guide, re.DOTALL):
        first, _, body = block.partition("\n")
        if re.fullmatch(r"# \w+\.py", first):
            files[first[2:-3]] = body
    assert set(files) == {"chat", "test_chat", "test_chat_ready_made"}
    pytester.makepyfile(**files)
    result = _run(pytester)
    result.assert_outcomes(passed=4)


def test_the_room_test_in_the_games_guide_passes(pytester: pytest.Pytester) -> None:
    """docs/games.md's test of the game server example, beside copies of the example as a user would have them."""
    root = SOURCE_ROOT.parent
    guide = (root / "docs" / "games.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", guide, re.DOTALL) if b.startswith("# test_game_rooms.py\n")]
    assert len(blocks) == 1
    examples = root / "examples"
    pytester.makepyfile(
        test_game_rooms=blocks[0].partition("\n")[2],
        game_server=(examples / "game_server.py").read_text(),
        game_messages=(examples / "game_messages.py").read_text(),
    )
    result = _run(pytester, "test_game_rooms.py")
    result.assert_outcomes(passed=1)
