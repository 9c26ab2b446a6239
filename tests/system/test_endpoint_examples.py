"""The end point examples (echo, chat, game state and server, RPC, file transfer) run as real processes, small.

Each test gets its own driver directories (the ``aeron_dir`` fixture for the
server, ``<aeron_dir>-<name>`` for end points that must not share its driver)
and its own free UDP port. The examples launch their drivers themselves and
remove the directories on a clean exit; the ``dirs`` fixture checks that and
removes whatever a failing test left behind.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_examples import example

pytestmark = pytest.mark.process

PATIENT = ["--connect-timeout", "30", "--timeout", "20"]
"""Echo client bounds generous enough for a loaded machine (the defaults suit an interactive user)."""
CHAT_PATIENT = ["--connect-timeout", "30"]


class Dirs:
    """Driver directories of one test: the server's, and ``<server's>-<name>`` ones for separate drivers."""

    def __init__(self, base: Path) -> None:
        self.base = base

    @property
    def server(self) -> str:
        return str(self.base)

    def own(self, name: str) -> str:
        return f"{self.base}-{name}"

    def left_behind(self) -> list[Path]:
        return sorted(self.base.parent.glob(self.base.name + "*"))


@pytest.fixture
def dirs(aeron_dir: Path) -> Iterator[Dirs]:
    made = Dirs(aeron_dir)
    try:
        yield made
    finally:
        for path in made.left_behind():
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def env(aeron_dir: Path) -> dict[str, str]:
    return {"AERON_DIR": str(aeron_dir), "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def port() -> int:
    """A UDP port free on 127.0.0.1 right now (the server binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- echo


def test_echo_over_ipc(dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]) -> None:
    common = ["--port", str(port), "--aeron-dir", dirs.server]
    with example("echo_server.py", common, tmp_path, env) as server:
        server.wait_for_output("Ctrl-C stops")
        with example("echo_client.py", [*common, *PATIENT, "--count", "5"], tmp_path, env) as client:
            assert client.wait(60) == 0, client.output()
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.output()
        sent, served = client.output(), server.output()
    assert "echo client: connected over ipc" in sent
    for i in range(1, 6):
        assert re.search(rf"^echo {i}: 'hello #{i}'  rtt=(\d+\.\d+ ms|\?.*)$", sent, re.MULTILINE), sent
    assert "echo client: 5 of 5 lines echoed" in sent
    assert re.search(r"echo server: client \d+ connected over ipc from ipc", served), served
    assert re.search(r"echo server: client \d+ left: done", served), served
    assert "echo server: stopped, 5 lines echoed" in served
    assert "Traceback" not in sent + served
    assert dirs.left_behind() == []


def test_echo_over_udp(dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]) -> None:
    """The client on a driver of its own: UDP; its texts come back exactly."""
    texts = ["first line", "ünïcödé ✓", "x" * 300]
    with example("echo_server.py", ["--port", str(port), "--aeron-dir", dirs.server], tmp_path, env) as server:
        server.wait_for_output("Ctrl-C stops")
        args = ["--port", str(port), "--aeron-dir", dirs.own("client"), *PATIENT]
        for text in texts:
            args += ["--text", text]
        with example("echo_client.py", args, tmp_path, env) as client:
            assert client.wait(60) == 0, client.output()
        sent = client.output()
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.output()
    assert re.search(rf"echo client: connected over udp as \d+ to 127\.0\.0\.1:{port}", sent), sent
    echoed = re.findall(r"^echo (\d+): '(.*)'  rtt=", sent, re.MULTILINE)
    assert echoed == [(str(i), text) for i, text in enumerate(texts, 1)], sent
    assert re.search(r"echo server: client \d+ connected over udp from 127\.0\.0\.1:\d+", server.output())
    assert dirs.left_behind() == []


def test_echo_client_reports_a_missing_server(dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]) -> None:
    args = ["--port", str(port), "--aeron-dir", dirs.own("client"), "--connect-timeout", "1"]
    with example("echo_client.py", args, tmp_path, env) as client:
        assert client.wait(60) == 1, client.output()
    assert f"echo client: no server at 127.0.0.1:{port} (within 1 s)" in client.output()
    assert "Traceback" not in client.output()


def test_echo_server_turns_away_clients_beyond_max_clients(
    dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]
) -> None:
    common = ["--port", str(port), "--aeron-dir", dirs.server]
    with example("echo_server.py", [*common, "--max-clients", "1"], tmp_path, env) as server:
        server.wait_for_output("Ctrl-C stops")
        # The first client stays connected (400 lines, 0.5 s apart: until we stop it)...
        first_args = [*common, *PATIENT, "--count", "400", "--interval", "0.5"]
        with example("echo_client.py", first_args, tmp_path, env) as first:
            first.wait_for_output("echo 1: ")
            # ...so the second one, over UDP this time, finds the server full.
            second_args = ["--port", str(port), "--aeron-dir", dirs.own("second"), "--udp", *PATIENT]
            with example("echo_client.py", second_args, tmp_path, env) as second:
                assert second.wait(60) == 1, second.output()
            assert first.process.poll() is None, "the first client should still be connected:\n" + first.output()
            first.signal(signal.SIGTERM)
            first.wait(30)
    assert "echo client: rejected: SERVER_FULL: server is full (1 clients)" in second.output()
    assert "Traceback" not in second.output()


# --------------------------------------------------------------------------- chat


def test_chat_relays_messages_and_announces_joins_and_leaves(
    dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]
) -> None:
    common = ["--port", str(port)]
    with example("chat.py", ["server", *common, "--aeron-dir", dirs.server], tmp_path, env) as server:
        server.wait_for_output("room open")
        # bob listens over IPC (the server's driver); alice talks over UDP (a driver of her own).
        bob_args = ["client", "--name", "bob", *common, "--aeron-dir", dirs.server, "--duration", "60", *CHAT_PATIENT]
        with example("chat.py", bob_args, tmp_path, env, stop_signal=signal.SIGINT) as bob:
            bob.wait_for_output("* you are bob; here: bob")
            alice_args = [
                "client",
                "--name",
                "alice",
                *common,
                "--aeron-dir",
                dirs.own("alice"),
                "--udp",
                *CHAT_PATIENT,
            ]
            alice_args += ["--say", "hello bob", "--say", "bye now", "--duration", "0.5"]
            with example("chat.py", alice_args, tmp_path, env) as alice:
                assert alice.wait(60) == 0, alice.output()
            bob.wait_for_output("* alice left")
            bob.signal(signal.SIGINT)
            assert bob.wait(30) == 0, bob.output()
        server.wait_for_output("bob left")
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.output()
        heard, said, room = bob.output(), alice.output(), server.output()
    assert heard.index("* alice joined") < heard.index("[alice] hello bob") < heard.index("[alice] bye now")
    assert heard.index("[alice] bye now") < heard.index("* alice left")
    assert "chat client: bob left" in heard
    assert "* you are alice; here: alice, bob" in said
    assert said.count("[alice] hello bob") == 1, "a sender is not relayed its own lines:\n" + said
    assert "chat client: alice left" in said
    for line in ("bob joined (1 here)", "alice joined (2 here)", "[alice] hello bob", "alice left (1 here)"):
        assert f"chat server: {line}" in room, room
    assert "chat server: closed" in room
    assert "Traceback" not in heard + said + room
    assert dirs.left_behind() == []


def test_chat_interactive_client_reads_stdin(dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]) -> None:
    """Without --say/--duration the client says what is typed; /quit leaves. Taken names get a number."""
    common = ["--port", str(port), "--aeron-dir", dirs.server]
    with example("chat.py", ["server", *common], tmp_path, env) as server:
        server.wait_for_output("room open")
        listener_args = ["client", "--name", "carol", *common, "--duration", "60", *CHAT_PATIENT]
        with example("chat.py", listener_args, tmp_path, env, stop_signal=signal.SIGINT) as listener:
            listener.wait_for_output("* you are carol")
            with example(
                "chat.py", ["client", "--name", "carol", *common], tmp_path, env, stdin=subprocess.PIPE
            ) as typist:
                typist.wait_for_output("* type to chat")
                assert typist.process.stdin is not None
                typist.process.stdin.write(b"hi from the keyboard\n")
                typist.process.stdin.flush()
                listener.wait_for_output("[carol2] hi from the keyboard")
                typist.process.stdin.write(b"/quit\n")
                typist.process.stdin.flush()
                assert typist.wait(30) == 0, typist.output()
            listener.wait_for_output("* carol2 left")
            listener.signal(signal.SIGINT)
            assert listener.wait(30) == 0, listener.output()
    assert "* you are carol2; here: carol, carol2" in typist.output()
    assert "chat client: carol2 left" in typist.output()


def test_chat_rooms_keep_their_talk_to_themselves(dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]) -> None:
    """Two rooms (server groups): a line said in one reaches its members only; leaving is announced there only."""
    common = ["--port", str(port), "--aeron-dir", dirs.server]
    with example("chat.py", ["server", *common], tmp_path, env) as server:
        server.wait_for_output("room open")
        listen = ["--duration", "60", *CHAT_PATIENT]
        with (
            example(
                "chat.py",
                ["client", "--name", "dan", "--room", "games", *common, *listen],
                tmp_path,
                env,
                stop_signal=signal.SIGINT,
            ) as dan,
            example(
                "chat.py", ["client", "--name", "eve", *common, *listen], tmp_path, env, stop_signal=signal.SIGINT
            ) as eve,
        ):
            dan.wait_for_output("* you are dan; here: dan")
            eve.wait_for_output("* you are eve; here: eve")
            fay_args = ["client", "--name", "fay", "--room", "games", *common, *CHAT_PATIENT]
            with example("chat.py", [*fay_args, "--say", "gg", "--duration", "0.5"], tmp_path, env) as fay:
                assert fay.wait(60) == 0, fay.output()
            dan.wait_for_output("* fay left")
            server.wait_for_output("fay left (1 here) in games")
            eve.signal(signal.SIGINT)
            dan.signal(signal.SIGINT)
            assert eve.wait(30) == 0, eve.output()
            assert dan.wait(30) == 0, dan.output()
        heard_in_games, heard_in_lobby = dan.output(), eve.output()
    assert "* you are fay; here: dan, fay" in fay.output()
    assert heard_in_games.index("* fay joined") < heard_in_games.index("[fay] gg") < heard_in_games.index("* fay left")
    assert "fay" not in heard_in_lobby, heard_in_lobby
    assert "chat server: fay joined (2 here) in games" in server.output()
    assert "Traceback" not in heard_in_games + heard_in_lobby + server.output()


# --------------------------------------------------------------------------- game state


def _summary(out: str) -> dict[str, float]:
    match = re.search(r"^game: (bots=.*)$", out, re.MULTILINE)
    assert match, out
    return {key: float(value) for key, value in re.findall(r"(\w+)=([\d.]+)", match.group(1))}


@pytest.mark.parametrize("transport", ["ipc", "udp"])
def test_game_state(transport: str, dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]) -> None:
    bots = 20 if transport == "ipc" else 10
    args = ["--bots", str(bots), "--procs", "2", "--duration", "3", "--port", str(port), "--aeron-dir", dirs.server]
    if transport == "udp":
        args.append("--udp")
    with example("game_state.py", args, tmp_path, env) as game:
        assert game.wait(90) == 0, game.output()
        out = game.output()
    assert f"starting {bots} bots in 2 processes over {transport}" in out
    assert f"game: {bots}/{bots} bots connected" in out
    per_process = re.findall(r"^bots\[(\d)\]: (\d+)/(\d+) connected", out, re.MULTILINE)
    assert sorted(per_process) == [("0", str(bots // 2), str(bots // 2)), ("1", str(bots // 2), str(bots // 2))], out
    summary = _summary(out)
    per_second = re.findall(r"^game: t=\d+s ticks/s=[\d.]+ sent/s=\d+ delivered/s=(\d+) ", out, re.MULTILINE)
    if summary["ticks"] >= 90:  # a line comes after a second and a half of ticks (fewer on a starved machine)
        assert per_second, out
        assert any(int(delivered) > 0 for delivered in per_second), out
    assert summary["bots"] == bots
    assert summary["connected"] == bots
    assert summary["snapshots_received"] > 0
    assert summary["snapshots_received"] <= summary["snapshots_sent"]
    assert summary["ticks"] > 0
    assert "Traceback" not in out
    assert dirs.left_behind() == [], "the server's or a bot process's driver directory was left behind"


def test_game_state_stops_early_on_sigterm(dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]) -> None:
    args = ["--bots", "4", "--duration", "120", "--port", str(port), "--aeron-dir", dirs.server]
    with example("game_state.py", args, tmp_path, env) as game:
        game.wait_for_output("game: t=1s ", timeout_s=60)
        game.signal(signal.SIGTERM)
        assert game.wait(60) == 0, game.output()
        out = game.output()
    summary = _summary(out)
    assert summary["connected"] == 4
    assert summary["snapshots_received"] > 0
    assert "Traceback" not in out
    assert dirs.left_behind() == []


# --------------------------------------------------------------------------- game server (rooms, UDP bots)


def test_game_server_with_bots_in_rooms(dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]) -> None:
    """20 UDP bots in 2 processes, rooms of 8: all connect, get snapshots newest-wins and their rooms' events."""
    server_args = ["server", "--port", str(port), "--aeron-dir", dirs.server, "--room-size", "8"]
    with example("game_server.py", server_args, tmp_path, env) as server:
        server.wait_for_output("Ctrl-C stops")
        bot_args = ["bots", "--port", str(port), "--aeron-dir", dirs.own("bots"), "--bots", "20", "--processes", "2"]
        with example("game_server.py", [*bot_args, "--duration", "4", "--chat-every", "1"], tmp_path, env) as bots:
            assert bots.wait(120) == 0, bots.output()
        server.wait_for_output("players=0 ")  # every bot left
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0, server.output()
        played, served = bots.output(), server.output()
    assert f"open UDP {port} and {port + 1} (control port)" in served
    assert sorted(re.findall(r"^bots\[(\d)\]: (\d+)/(\d+) connected", played, re.MULTILINE)) == [
        ("0", "10", "10"),
        ("1", "10", "10"),
    ], played
    match = re.search(r"^bots: 20 bots in 2 processes: (.*)$", played, re.MULTILINE)
    assert match, played
    totals = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match.group(1))}
    assert totals["connected"] == 20, totals
    assert totals["welcomed"] == 20, totals
    assert totals["lost"] == 0, totals
    assert totals["snapshots"] > 0, totals
    # Room events, reliable: each bot hears itself and later arrivals join its room; rooms of 8.
    assert totals["joined"] >= 20, totals
    assert totals["chat"] > 0, totals
    assert totals["scored"] > 0, totals
    rooms = [int(n) for n in re.findall(r"^server: t=\d+s players=\d+ rooms=(\d+) ", served, re.MULTILINE)]
    assert max(rooms) >= 2, served  # 10 bots at once at least (a process's), 8 a room
    assert re.search(r"snapshots/s/player=(?!0\.0 )[\d.]+ ", served), served
    assert re.search(r"^server: closed after \d+ ticks \(\d+ late\) with 0 players; \d+ rooms made", served, re.M)
    assert "Traceback" not in played + served
    assert dirs.left_behind() == []


def test_game_server_and_bots_stop_cleanly_on_signals(
    dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]
) -> None:
    """Bots with no --duration play until SIGTERM, then close their clients and sum up; the server stops on SIGINT."""
    server_args = ["server", "--port", str(port), "--aeron-dir", dirs.server]
    with example("game_server.py", server_args, tmp_path, env) as server:
        server.wait_for_output("Ctrl-C stops")
        bot_args = ["bots", "--port", str(port), "--aeron-dir", dirs.own("bots"), "--bots", "8", "--processes", "2"]
        with example("game_server.py", bot_args, tmp_path, env) as bots:
            bots.wait_for_output("bots[0]: 4/4 connected", timeout_s=90)
            bots.wait_for_output("bots[1]: 4/4 connected", timeout_s=90)
            server.wait_for_output("players=8 ", timeout_s=60)
            bots.signal(signal.SIGTERM)
            assert bots.wait(60) == 0, bots.output()
        server.wait_for_output("players=0 ", timeout_s=60)
        server.signal(signal.SIGINT)
        assert server.wait(30) == 0, server.output()
        played, served = bots.output(), server.output()
    match = re.search(r"^bots: 8 bots in 2 processes: (.*)$", played, re.MULTILINE)
    assert match, played
    totals = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match.group(1))}
    assert totals["connected"] == 8, totals
    assert totals["lost"] == 0, totals
    assert "server: closed after " in served
    assert "Traceback" not in played + served
    assert dirs.left_behind() == []


# --------------------------------------------------------------------------- RPC (inventory)


@pytest.mark.parametrize("transport", ["ipc", "udp"])
def test_rpc_service_and_client(transport: str, dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]) -> None:
    """Typed calls, remote KeyError/ValueError, a timeout that cancels the callee, a callback, a one-way note."""
    service_args = ["--port", str(port), "--aeron-dir", dirs.server, "--once"]
    with example("rpc_service.py", service_args, tmp_path, env) as service:
        service.wait_for_output("Ctrl-C stops")
        client_args = ["--port", str(port), "--connect-timeout", "30", "--timeout", "20"]
        client_args += ["--aeron-dir", dirs.server] if transport == "ipc" else ["--aeron-dir", dirs.own("c"), "--udp"]
        with example("rpc_client.py", client_args, tmp_path, env) as client:
            assert client.wait(60) == 0, client.output()
        # --once: the service stops by itself once its client has left.
        assert service.wait(30) == 0, service.output()
        called, served = client.output(), service.output()
    assert f"rpc client: connected over {transport} as " in called
    for line in (
        "add(sword, 3) -> 3",
        "take(sword, 1) -> 2",
        "find(shield) -> Item(sku='shield', name='Round shield', price_cents=900)",
        "5 concurrent add(arrow, 10) -> [10, 20, 30, 40, 50]",
        "stock() -> {'sword': 2, 'shield': 2, 'arrow': 50}",
        "take(bow, 1) -> remote KeyError: 'bow'",
        "take(sword, 10) -> remote ValueError: only 2 of 'sword' in stock, 10 asked for",
        "audit(30) with a 0.3 s timeout -> RpcTimeoutError",
        "approver: asked to buy 4 x shield for 36.00 -> yes",
        "reorder(shield, 4) -> 6",
        "approver: asked to buy 10 x sword for 125.00 -> no, over the budget of 50.00",
        "reorder(sword, 10) -> 2",
        "audit(0) -> 58",
        "rpc client: all answers as expected",
    ):
        assert line in called, called
    assert re.search(rf"inventory service: client \d+ connected over {transport}", served), served
    assert re.search(r"inventory service: audit for client \d+ cancelled \(the caller gave up\)", served), served
    assert "inventory service: reordered 4 x shield (36.00), approved" in served
    assert "inventory service: reorder of 10 x sword (125.00) declined" in served
    assert re.search(r"inventory service: note from client \d+: client done", served), served
    assert re.search(r"inventory service: client \d+ left \(done\); it made 17 calls, we made 2", served), served
    assert "inventory service: stopped after 17 calls" in served
    assert "Traceback" not in called + served
    assert dirs.left_behind() == []


def test_rpc_client_reports_a_missing_service(dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]) -> None:
    args = ["--port", str(port), "--aeron-dir", dirs.own("client"), "--connect-timeout", "1"]
    with example("rpc_client.py", args, tmp_path, env) as client:
        assert client.wait(60) == 1, client.output()
    assert f"rpc client: no service at 127.0.0.1:{port} (within 1 s)" in client.output()
    assert "Traceback" not in client.output()


# --------------------------------------------------------------------------- file transfer


@pytest.mark.parametrize("transport", ["ipc", "udp"])
def test_file_transfer(transport: str, dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]) -> None:
    """A receiver process saves what a sender process streams; both check the SHA-256 and exit 0."""
    source = tmp_path / "payload.bin"
    source.write_bytes(os.urandom(3 << 20) + b"tail")  # several chunks and a short last one
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    downloads = tmp_path / "downloads"
    receive_args = ["receive", str(downloads), "--port", str(port), "--aeron-dir", dirs.server, "--timeout", "30"]
    with example("file_transfer.py", receive_args, tmp_path, env) as receiver:
        receiver.wait_for_output("receiver: listening on")
        send_args = ["send", str(source), "--port", str(port), "--connect-timeout", "30", "--timeout", "30"]
        send_args += ["--aeron-dir", dirs.server] if transport == "ipc" else ["--aeron-dir", dirs.own("s"), "--udp"]
        with example("file_transfer.py", send_args, tmp_path, env) as sender:
            assert sender.wait(60) == 0, sender.output()
        assert receiver.wait(30) == 0, receiver.output()  # --count 1: it stops after one file
        sent, received = sender.output(), receiver.output()
    assert (downloads / "payload.bin").read_bytes() == source.read_bytes()
    assert [p.name for p in downloads.iterdir()] == ["payload.bin"], "a partial file was left behind"
    assert f"sender: payload.bin: {source.stat().st_size:,} bytes, sha256 {digest}" in sent, sent
    assert f"sender: connected over {transport}, chunks of 524,278" in sent, sent
    assert f"sender: receiver says: verified: payload.bin, {source.stat().st_size} bytes, sha256 {digest}" in sent
    assert f"receiver: sha256 {digest} matches the sender's" in received, received
    assert "receiver: stopped, 1 file(s) verified, 0 failed" in received, received
    assert "send payload.bin" in sent  # the progress bars' final state
    assert "receive payload.bin" in received
    assert "Traceback" not in sent + received
    assert dirs.left_behind() == []


def test_file_transfer_sender_reports_a_missing_receiver(
    dirs: Dirs, port: int, tmp_path: Path, env: dict[str, str]
) -> None:
    source = tmp_path / "small.bin"
    source.write_bytes(b"x" * 1000)
    args = ["send", str(source), "--port", str(port), "--aeron-dir", dirs.own("s"), "--connect-timeout", "1"]
    with example("file_transfer.py", args, tmp_path, env) as sender:
        assert sender.wait(60) == 1, sender.output()
    assert f"sender: no receiver at 127.0.0.1:{port} (within 1 s)" in sender.output()
    assert "Traceback" not in sender.output()


def test_file_transfer_demo(dirs: Dirs, tmp_path: Path, env: dict[str, str]) -> None:
    args = ["demo", "--size-mib", "4", "--aeron-dir", dirs.server, "--timeout", "30"]
    with example("file_transfer.py", args, tmp_path, env) as demo:
        assert demo.wait(60) == 0, demo.output()
        out = demo.output()
    assert "sender: connected over ipc" in out, out
    assert re.search(r"receiver: sha256 [0-9a-f]{64} matches the sender's", out), out
    assert "demo: the copy is identical" in out, out
    assert "Traceback" not in out
    assert dirs.left_behind() == []
