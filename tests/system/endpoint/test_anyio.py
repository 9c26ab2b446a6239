"""End points under anyio: they run on its asyncio backend; under trio they refuse at once with a typed error.

Real servers and clients on real drivers; each test runs its own event loop with ``anyio.run`` (or ``trio.run``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from endpoint import Client, Connection, EndpointError, Server, UnsupportedEventLoopError
from endpoint.eventloop import running_async_library
from support.endpoints import Ack, Chat, client_config, server_config

anyio = pytest.importorskip("anyio")


@pytest.mark.parametrize("transport", ["ipc", "udp"])
def test_a_server_and_a_client_exchange_messages_under_anyio_on_asyncio(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async def main() -> list[object]:
        assert running_async_library() == "asyncio"
        got: list[object] = []
        answered = anyio.Event()
        with anyio.fail_after(30):
            async with Server(server_config(aeron_dir, port)) as server:

                @server.on_message(Chat)
                async def echo(connection: Connection, message: Chat) -> None:
                    await connection.send(Ack(len(message.text)))

                async with Client(client_config(transport, aeron_dir, client_dir)) as client:

                    @client.on_message(Ack)
                    def on_ack(connection: Connection, message: Ack) -> None:
                        got.append(message)
                        answered.set()

                    connection = await client.connect("127.0.0.1", port)
                    await connection.send(Chat("hello"))
                    await answered.wait()
                    assert len(server.connections) == 1
        return got

    assert anyio.run(main, backend="asyncio") == [Ack(5)]


def test_constructing_an_end_point_under_trio_fails_at_once_with_a_typed_error(aeron_dir: Path, port: int) -> None:
    pytest.importorskip("trio")
    config = server_config(aeron_dir, port)
    client_cfg = client_config("ipc", aeron_dir, aeron_dir)

    async def main() -> list[UnsupportedEventLoopError]:
        assert running_async_library() == "trio"
        caught: list[UnsupportedEventLoopError] = []
        for make in (lambda: Server(config), lambda: Client(client_cfg)):
            with pytest.raises(UnsupportedEventLoopError) as info:
                make()
            caught.append(info.value)
        return caught

    caught = anyio.run(main, backend="trio")
    for error, kind in zip(caught, ("Server", "Client"), strict=True):
        assert isinstance(error, EndpointError)
        assert error.library == "trio"
        assert f"a {kind} needs asyncio" in str(error)
        assert "backend='asyncio'" in str(error)
    assert not aeron_dir.exists(), "nothing was started"


def test_starting_an_end_point_built_outside_any_loop_under_trio_fails_with_the_typed_error(
    aeron_dir: Path, port: int
) -> None:
    trio = pytest.importorskip("trio")
    assert running_async_library() is None
    server = Server(server_config(aeron_dir, port))  # outside any loop: fine, it starts nothing
    client = Client(client_config("ipc", aeron_dir, aeron_dir))

    async def main() -> list[str]:
        messages = []
        with pytest.raises(UnsupportedEventLoopError, match="starting a Server needs asyncio's event loop") as info:
            await server.bind()
        messages.append(str(info.value))
        with pytest.raises(UnsupportedEventLoopError, match="starting a Client needs asyncio's event loop") as info:
            await client.connect("127.0.0.1", port)
        messages.append(str(info.value))
        await server.close()  # nothing was started: closing needs no loop
        await client.close()
        return messages

    messages = trio.run(main)
    assert all("under trio" in text for text in messages)
    assert not aeron_dir.exists(), "no driver was started"


def test_the_detection_tells_asyncio_trio_and_no_loop_apart() -> None:
    async def under() -> str | None:
        return running_async_library()

    assert running_async_library() is None
    assert asyncio.run(under()) == "asyncio"
    assert anyio.run(under, backend="asyncio") == "asyncio"
    trio = pytest.importorskip("trio")
    assert trio.run(under) == "trio"
