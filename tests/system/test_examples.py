"""The programs in ``examples/`` run as real processes, with small bounded parameters, and say what they should."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.driver_process import DriverProcess
from support.waiting import execute_until

pytestmark = pytest.mark.process

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class Example:
    """One example program running as a child process, its output going to a file."""

    def __init__(self, process: subprocess.Popen[bytes], output_path: Path) -> None:
        self.process = process
        self.output_path = output_path

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.output_path.read_text(errors="replace") if self.output_path.exists() else ""

    def wait_for_output(self, text: str, timeout_s: float = 30.0) -> None:
        def seen() -> bool:
            if text in self.output():
                return True
            if self.process.poll() is not None:
                raise AssertionError(
                    f"exited with {self.process.returncode} before printing {text!r}:\n{self.output()}"
                )
            return False

        execute_until(seen, timeout_s=timeout_s, interval_s=0.02, description=f"{text!r} from pid {self.pid}")

    def wait(self, timeout_s: float = 60.0) -> int:
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"pid {self.pid} still running after {timeout_s} s:\n{self.output()}") from None

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL the example and anything it spawned (it leads its own process group)."""
        if self.process.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(10)


@contextmanager
def example(
    name: str,
    args: Sequence[str],
    tmp_path: Path,
    env: Mapping[str, str],
    *,
    stop_signal: int = signal.SIGTERM,
    stdin: int | None = None,
) -> Iterator[Example]:
    """Start ``examples/<name>``; afterwards stop it by pid (``stop_signal``, then SIGKILL) if it still runs.

    ``stdin=subprocess.PIPE`` lets the test type into it (``example.process.stdin``).
    """
    output_path = tmp_path / f"{name.removesuffix('.py')}-{len(list(tmp_path.iterdir()))}.out"
    with output_path.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, str(EXAMPLES / name), *args],
            stdin=stdin,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
        )
    running = Example(process, output_path)
    try:
        yield running
    finally:
        if process.poll() is None:
            running.signal(stop_signal)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                running.kill()
        if process.stdin is not None:
            process.stdin.close()


@pytest.fixture
def example_env(aeron_dir: Path) -> dict[str, str]:
    """AERON_DIR for the examples' defaults: a unique directory, never the user's own."""
    return {"AERON_DIR": str(aeron_dir), "PYTHONUNBUFFERED": "1"}


def test_demo(tmp_path: Path, example_env: dict[str, str]) -> None:
    """The README's demo: a server, an IPC client and a UDP client on embedded drivers."""
    with example("demo.py", [], tmp_path, example_env) as demo:
        assert demo.wait(180) == 0, demo.output()
        out = demo.output()
    assert re.search(r"ipc client: connection \d+ over IPC", out), out
    assert re.search(r"udp client: connection \d+ over UDP", out), out
    for text in ("ada moved to (3, 4)", "ada dashed at speed 3", "bob moved to (1, 2)", "bob dashed at speed 2"):
        assert f"ack: {text}" in out
    assert "server broadcast reached 2 connections" in out
    assert out.count("news: round two starts") == 2
    assert "rejected: SERIALIZATION_MISMATCH" in out
    assert re.search(r"recorded aeron:ipc\S* stream -?\d+: recording 0, \d+ bytes", out), out
    for player in ("ada", "bob", "eve"):  # Spark's aggregation of the recording
        assert f"[spark] {player}: 100 positions, mean x 4.50" in out, out
    assert "closed: 'ada logs off'" in out
    assert "driver directories removed" in out
    assert "demo complete: all acks and news delivered" in out


def test_game_recording_reads_back_every_state_on_spark(tmp_path: Path, example_env: dict[str, str]) -> None:
    with example("game_recording.py", ["--players", "6", "--ticks", "200"], tmp_path, example_env) as game:
        assert game.wait(180) == 0, game.output()
        out = game.output()
    assert "recorded 1200 PlayerState messages" in out, out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0].isdigit()]
    assert sorted(int(r[0]) for r in rows) == list(range(6)), out
    assert all(int(r[1]) == 200 for r in rows), out
    assert "game recording complete: 1200 states of 6 players read back by Spark" in out


def test_live_stats_counts_every_state_exactly_once(tmp_path: Path, example_env: dict[str, str]) -> None:
    with example("live_stats.py", ["--duration", "4", "--players", "5"], tmp_path, example_env) as live:
        assert live.wait(240) == 0, live.output()
        out = live.output()
    assert re.search(r"final: 5 players, (\d+) states counted, \1 published", out), out
    assert "live stats complete: every published state counted exactly once" in out


def test_driver_demo(tmp_path: Path, example_env: dict[str, str]) -> None:
    with example("driver_demo.py", [], tmp_path, example_env) as demo:
        assert demo.wait(60) == 0, demo.output()
        out = demo.output()
    assert "offer(b'hello?') -> NOT_CONNECTED" in out
    for text in ("b'hello, endpoint'", "b'second message'", "b'last one'"):
        assert f"[publisher] offer_async({text})" in out
        assert re.search(rf"\[reader\] {re.escape(text)} session=-?\d+ stream=1001 position=\d+", out), out
    assert re.search(r"\[reader\] <5000 bytes: .*> session=-?\d+ stream=1001 position=\d+", out), out
    assert "came as 4 pieces (5000 bytes); reassembled intact: True" in out
    assert "then offer -> BACK_PRESSURED" in out
    assert re.search(r"offer_async waited \d+ ms for the reader to resume -> position=\d+", out), out
    assert "nothing lost" in out
    assert not list(Path(example_env["AERON_DIR"]).parent.glob(Path(example_env["AERON_DIR"]).name + "-*")), (
        "the embedded driver's directory was left behind"
    )


def test_basic_subscriber_prints_what_basic_publisher_sends(
    driver_process: DriverProcess, tmp_path: Path, example_env: dict[str, str]
) -> None:
    common = ["--dir", str(driver_process.aeron_dir), "--stream", "1001"]
    with example("basic_subscriber.py", [*common, "--count", "5"], tmp_path, example_env) as subscriber:
        subscriber.wait_for_output("Ctrl-C stops")
        with example(
            "basic_publisher.py", [*common, "--messages", "5", "--interval", "0.05"], tmp_path, example_env
        ) as publisher:
            assert publisher.wait(60) == 0, publisher.output()
        assert subscriber.wait(60) == 0, subscriber.output()
        published, received = publisher.output(), subscriber.output()
    for i in range(1, 6):
        assert re.search(rf"publisher: sent 'Hello World! {i}' -> position={64 * i}\n", published), published
        assert re.search(rf"subscriber: 'Hello World! {i}' session=-?\d+ stream=1001 position={64 * i}\n", received), (
            received
        )
    assert "publisher: done, 5 of 5 sent" in published
    assert "subscriber: image available: session=" in received
    assert "subscriber: done, 5 messages" in received


def test_basic_subscriber_stops_cleanly_on_sigint(
    driver_process: DriverProcess, tmp_path: Path, example_env: dict[str, str]
) -> None:
    args = ["--dir", str(driver_process.aeron_dir)]
    with example("basic_subscriber.py", args, tmp_path, example_env, stop_signal=signal.SIGINT) as subscriber:
        subscriber.wait_for_output("Ctrl-C stops")
        subscriber.signal(signal.SIGINT)
        assert subscriber.wait(30) == 0, subscriber.output()
    assert "subscriber: done, 0 messages" in subscriber.output()
    assert "Traceback" not in subscriber.output()


def test_basic_publisher_without_subscriber_reports_not_connected(
    driver_process: DriverProcess, tmp_path: Path, example_env: dict[str, str]
) -> None:
    args = ["--dir", str(driver_process.aeron_dir), "--messages", "1", "--wait", "0.2"]
    with example("basic_publisher.py", args, tmp_path, example_env) as publisher:
        assert publisher.wait(60) == 0, publisher.output()
    out = publisher.output()
    assert "publisher: no subscriber yet, waiting..." in out
    assert "publisher: 'Hello World! 1' not sent: NOT_CONNECTED" in out
    assert "publisher: done, 0 of 1 sent" in out


def test_examples_report_a_missing_driver(tmp_path: Path, example_env: dict[str, str]) -> None:
    """No driver in --dir: a one-line error and exit code 1, not a traceback (after the driver timeout)."""
    env = {**example_env, "AERON_DRIVER_TIMEOUT": "1000"}
    with example("basic_subscriber.py", ["--dir", str(tmp_path / "nowhere")], tmp_path, env) as subscriber:
        assert subscriber.wait(60) == 1, subscriber.output()
    assert "subscriber: no driver in" in subscriber.output()
    assert "Traceback" not in subscriber.output()


@pytest.mark.parametrize("driver", ["embedded", "standalone"])
def test_ipc_throughput(
    driver: str, request: pytest.FixtureRequest, tmp_path: Path, example_env: dict[str, str]
) -> None:
    args = ["--duration", "1"]
    if driver == "standalone":
        args += ["--dir", str(request.getfixturevalue("driver_process").aeron_dir)]
    with example("ipc_throughput.py", args, tmp_path, example_env, stop_signal=signal.SIGINT) as throughput:
        assert throughput.wait(90) == 0, throughput.output()
        out = throughput.output()
    assert ("embedded driver in" in out) == (driver == "embedded")
    assert "32-byte messages in batches of 64" in out
    per_second = re.findall(r"^\s*1: +([\d,]+) msgs/s +([\d.]+) MB/s", out, re.MULTILINE)
    assert per_second, out
    average = re.search(r"average ([\d,]+) msgs/s, ([\d.]+) MB/s", out)
    assert average, out
    assert int(average.group(1).replace(",", "")) > 0, out


@pytest.mark.parametrize("idle", ["busy_spin", "backoff"])
def test_ping_pong(idle: str, driver_process: DriverProcess, tmp_path: Path, example_env: dict[str, str]) -> None:
    common = ["--dir", str(driver_process.aeron_dir), "--idle", idle]
    with example("pong.py", common, tmp_path, example_env, stop_signal=signal.SIGINT) as pong:
        pong.wait_for_output("Ctrl-C stops")
        with example("ping.py", [*common, "--messages", "200", "--warmup", "50"], tmp_path, example_env) as ping:
            assert ping.wait(60) == 0, ping.output()
        pong.signal(signal.SIGINT)
        assert pong.wait(30) == 0, pong.output()
        pinged, ponged = ping.output(), pong.output()
    assert "ping: warm-up: 50 round trips" in pinged
    assert f"ping: 200 round trips of 32 bytes, idle={idle}" in pinged
    stats = re.search(r"rtt us +p50=([\d.]+) +p90=([\d.]+) +p99=([\d.]+) +p99\.9=([\d.]+) +max=([\d.]+)", pinged)
    assert stats, pinged
    values = [float(v) for v in stats.groups()]
    assert values == sorted(values), pinged
    assert values[0] > 0
    assert "pong: done, 250 messages echoed" in ponged
