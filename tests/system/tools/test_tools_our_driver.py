"""Every tool, as a separate process, against OUR standalone driver carrying real IPC traffic.

Also the live view rendered in a real terminal (tmux) and the exporter scraped over HTTP.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.client import Aeron, ConcurrentPublication, Subscription
from driver.concurrent.loss_report import LossReport, LossReportFile
from driver.errors import RegistrationError
from support.clients import offer_all, wait_for_image
from support.driver_process import DriverProcess
from support.promtool import promtool_check_metrics
from support.waiting import execute_until

pytestmark = pytest.mark.process

CHANNEL = "aeron:ipc?term-length=64k"
STREAM = 4242
MESSAGE = b"endpoint tools traffic " * 4


def tools(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "driver.tools", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


class Traffic:
    """Our client on the driver: one IPC publication, one subscription that reads only part of the stream."""

    def __init__(self, aeron_dir: Path) -> None:
        self.aeron = Aeron.connect(aeron_dir=aeron_dir)
        self.subscription: Subscription = self.aeron.add_subscription(CHANNEL, STREAM)
        self.publication: ConcurrentPublication = self.aeron.add_publication(CHANNEL, STREAM)
        wait_for_image(self.subscription)
        self.received = 0

    def _count(self, payload: memoryview, header: object) -> None:
        self.received += 1

    def drain(self, limit: int = 100) -> int:
        return self.subscription.poll(self._count, limit)

    def send(self, count: int) -> None:
        offer_all(self.publication, [MESSAGE] * count, self.drain)

    def close(self) -> None:
        self.aeron.close()


@pytest.fixture
def traffic(driver_process: DriverProcess) -> Iterator[Traffic]:
    t = Traffic(driver_process.aeron_dir)
    try:
        t.send(500)
        execute_until(lambda: t.received >= 200, t.drain, timeout_s=30, description="200 messages read")
        yield t
    finally:
        t.close()


def _stat_json(aeron_dir: Path, *extra: str) -> dict[str, object]:
    done = tools("stat", "-d", str(aeron_dir), "--json", *extra)
    assert done.returncode == 0, done.stderr
    doc: dict[str, object] = json.loads(done.stdout)
    return doc


def _counters(aeron_dir: Path, *extra: str) -> list[dict[str, object]]:
    counters = _stat_json(aeron_dir, *extra)["counters"]
    assert isinstance(counters, list)
    return counters


def test_stat_once_and_json(driver_process: DriverProcess, traffic: Traffic) -> None:
    text = tools("stat", "-d", str(driver_process.aeron_dir), "--once")
    assert text.returncode == 0, text.stderr
    assert "Bytes sent" in text.stdout
    assert re.search(
        rf"^\s+\d+\s+[\d,]+\s+4 sub-pos\s+sub-pos: \d+ -?\d+ {STREAM} {re.escape(CHANNEL)} @0$", text.stdout, re.M
    )

    position = traffic.publication.position

    def pub_pos_caught_up() -> bool:
        counters = _counters(driver_process.aeron_dir, "--type", "pub-pos", "--stream", str(STREAM))
        return len(counters) == 1 and counters[0]["value"] == position

    execute_until(pub_pos_caught_up, timeout_s=20, interval_s=0.1, description="pub-pos sample = publication position")
    subs = _counters(driver_process.aeron_dir, "--type", "4", "--channel", "term-length=64k")
    assert len(subs) == 1
    assert subs[0]["session_id"] == traffic.publication.session_id
    assert subs[0]["stream_id"] == STREAM
    assert subs[0]["value"] == traffic.subscription.images[0].position
    heartbeats = _counters(driver_process.aeron_dir, "--type", "client-heartbeat")
    assert [c["registration_id"] for c in heartbeats] == [traffic.aeron.client_id]


def test_stat_rates_over_two_readings(driver_process: DriverProcess, traffic: Traffic) -> None:
    argv = ["stat", "-d", str(driver_process.aeron_dir), "--type", "4", "--count", "2", "--interval", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "driver.tools", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            traffic.drain()
            time.sleep(0.01)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err
    tables = out.split("\n\n") if "\n\n" in out else [out]
    assert "RATE/S" in out, tables
    rows = [line for line in out.splitlines() if " sub-pos " in line]
    assert len(rows) == 2
    first_value = int(rows[0].split()[1].replace(",", ""))
    second_value, rate = (float(x.replace(",", "")) for x in rows[1].split()[1:3])
    assert second_value >= first_value
    assert (rate > 0) == (second_value > first_value)


def test_streams_lag_matches_the_client(driver_process: DriverProcess, traffic: Traffic) -> None:
    publisher = traffic.publication.position
    subscriber = traffic.subscription.images[0].position
    assert publisher > subscriber  # the subscription has read only part of the stream

    def lag() -> dict[str, object] | None:
        done = tools("streams", "-d", str(driver_process.aeron_dir), "--json")
        assert done.returncode == 0, done.stderr
        for stream in json.loads(done.stdout)["streams"]:
            if stream["stream_id"] == STREAM and stream["publisher_position"] == publisher:
                assert isinstance(stream, dict)
                return stream
        return None

    stream = execute_until(lag, timeout_s=20, interval_s=0.1, description="streams to show the publisher position")
    assert stream["channel"] == CHANNEL
    assert stream["session_id"] == traffic.publication.session_id
    assert stream["lags"] == {"end_to_end": publisher - subscriber}
    text = tools("streams", "-d", str(driver_process.aeron_dir))
    assert f"{CHANNEL}  stream {STREAM}  session {traffic.publication.session_id}" in text.stdout
    assert f"lag         end to end {publisher - subscriber:,}" in text.stdout


def test_errors_shows_a_refused_command(driver_process: DriverProcess, traffic: Traffic) -> None:
    for _ in range(2):
        with pytest.raises(RegistrationError):
            traffic.aeron.add_publication("aeron:ipc?term-length=3", 1)

    def errors() -> str:
        done = tools("errors", "-d", str(driver_process.aeron_dir))
        assert done.returncode == 0, done.stderr
        return done.stdout if "1 distinct errors observed." in done.stdout else ""

    text = execute_until(errors, timeout_s=20, interval_s=0.1, description="the error in the error log")
    assert re.match(r"\*\*\*\n2 observations from \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}[+-]\d{4} to ", text)
    assert "term-length" in text
    doc = json.loads(tools("errors", "-d", str(driver_process.aeron_dir), "--json").stdout)
    assert doc["errors"][0]["observation_count"] == 2


def test_loss_reads_the_drivers_report(driver_process: DriverProcess, traffic: Traffic) -> None:
    empty = tools("loss", "-d", str(driver_process.aeron_dir))
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout.splitlines()[-1] == "0 entries read"
    # IPC never loses data; write what the UDP receiver will write, into the driver's own file.
    with LossReportFile.map_existing(driver_process.aeron_dir) as report_file:
        report = LossReport(report_file.buffer)
        entry = report.create_entry(1408, 1_700_000_000_000, 5, 6, "aeron:udp?endpoint=localhost:40124", "/127.0.0.1:9")
        assert entry is not None
        report.record_observation(entry, 32, 1_700_000_001_000)
    done = tools("loss", "-d", str(driver_process.aeron_dir), "--json")
    entries = json.loads(done.stdout)["entries"]
    assert [(e["observation_count"], e["total_bytes_lost"], e["channel"], e["source"]) for e in entries] == [
        (2, 1440, "aeron:udp?endpoint=localhost:40124", "/127.0.0.1:9")
    ]


def test_log_dumps_the_publication(driver_process: DriverProcess, traffic: Traffic) -> None:
    listing = tools("log", "-d", str(driver_process.aeron_dir))
    assert listing.returncode == 0, listing.stderr
    names = re.findall(r"^(\S+\.logbuffer)\s", listing.stdout, re.M)
    assert names, listing.stdout
    dumped = ""
    for name in names:
        dumped = tools("log", str(driver_process.aeron_dir / name), "--frames", "3", "--hexdump", "32").stdout
        if f"stream={STREAM}" in dumped:
            break
    assert f"session={traffic.publication.session_id} stream={STREAM}" in dumped
    assert "term length:         65,536" in dumped
    assert "|endpoint tools traffic e|" in dumped or "|endpoint tools t" in dumped
    assert len(re.findall(r"^  offset=", dumped, re.M)) == 3


def test_driver_health_alive_then_dead(driver_process: DriverProcess, traffic: Traffic) -> None:
    done = tools("driver", "-d", str(driver_process.aeron_dir), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    status = json.loads(done.stdout)
    assert status["alive"] is True
    assert status["pid"] == driver_process.pid
    assert status["pid_running"] is True
    assert status["client_count"] == 1
    assert status["cnc_version"] == 512
    traffic.close()
    driver_process.kill()
    time.sleep(0.3)
    dead = execute_until(
        lambda: (
            (d := tools("driver", "-d", str(driver_process.aeron_dir), "--timeout-ms", "500")).returncode == 1 and d
        ),
        timeout_s=20,
        interval_s=0.2,
        description="driver reported dead",
    )
    assert dead.stdout.startswith("driver: DEAD")
    assert "process running here: no" in dead.stdout


def test_exporter_scrapes(driver_process: DriverProcess, traffic: Traffic) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "driver.tools", "stat", "-d", str(driver_process.aeron_dir), "--serve", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        assert match, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        url = f"http://127.0.0.1:{match[1]}/metrics"
        request = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text"})
        with urllib.request.urlopen(request, timeout=10) as response:
            first = response.read().decode()
        assert first.endswith("# EOF\n")
        assert "aeron_driver_up 1" in first
        assert (
            f'aeron_driver_info{{directory="{driver_process.aeron_dir}",'
            f'cnc_version="512",pid="{driver_process.pid}"}} 1' in first
        )
        assert re.search(r"^aeron_driver_sent_bytes_total \d+$", first, re.MULTILINE), first
        pattern = re.compile(rf'aeron_subscriber_position_bytes\{{[^}}]*stream_id="{STREAM}"[^}}]*\}} (\d+)')
        before = int(pattern.search(first)[1])  # type: ignore[index]
        with urllib.request.urlopen(url, timeout=10) as response:
            promtool_check_metrics(response.read().decode())
        execute_until(lambda: traffic.drain() == 0, timeout_s=20, description="subscriber drained")

        def advanced() -> bool:
            with urllib.request.urlopen(url, timeout=10) as response:
                match = pattern.search(response.read().decode())
            return match is not None and int(match[1]) > before

        execute_until(advanced, timeout_s=20, interval_s=0.1, description="a scrape to show the new position")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    assert proc.returncode == 0


# ------------------------------------------------------------------------------------------------ live view (tmux)


@pytest.fixture
def tmux() -> Iterator[list[str]]:
    """A private tmux server (its own socket); only that server is killed afterwards."""
    exe = shutil.which("tmux")
    if exe is None:
        pytest.skip("tmux is not installed")
    base = [exe, "-L", f"endpoint-tools-{os.getpid()}-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]
    try:
        yield base
    finally:
        subprocess.run([*base, "kill-server"], capture_output=True, timeout=10, check=False)


def test_live_view_in_a_terminal(driver_process: DriverProcess, traffic: Traffic, tmux: list[str]) -> None:
    command = f"{sys.executable} -m driver.tools stat -d {driver_process.aeron_dir} --interval 0.3"
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "live", "-x", "180", "-y", "80", command],
        check=True,
        timeout=10,
        # the pane's size, not the COLUMNS and LINES this process may have (pytest-xdist's workers say 80x24)
        env={**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}, "TERM": "xterm-256color"},
    )

    def screen() -> str:
        done = subprocess.run([*tmux, "capture-pane", "-p", "-t", "live"], capture_output=True, text=True, timeout=10)
        return done.stdout

    def rendered_with_rate() -> str:
        # messages keep flowing for as long as the view takes to start (seconds on a loaded machine): a rate is
        # shown only while the position moves
        traffic.send(20)
        traffic.drain(20)
        text = screen()
        row = next((line for line in text.splitlines() if " sub-pos " in line and f" {STREAM} " in line), "")
        return text if re.search(r"[1-9][\d,]*\.\d/s\s*$", row) else ""

    text = execute_until(rendered_with_rate, timeout_s=30, interval_s=0.1, description="the live view with a rate")
    assert "Aeron Stat (CnC v512)" in text
    assert str(driver_process.aeron_dir) in text
    assert "driver alive" in text
    header = next(line for line in text.splitlines() if line.lstrip().startswith("ID"))
    assert header.split() == ["ID", "TYPE", "LABEL", "VALUE", "RATE"]
    assert re.search(r"^\s*0\s+system\s+Bytes sent\s+0\s", text, re.M)
    assert "refresh every 0.3 s - Ctrl-C to quit" in text

    subprocess.run([*tmux, "send-keys", "-t", "live", "C-c"], check=True, timeout=10)
    execute_until(
        lambda: subprocess.run([*tmux, "has-session", "-t", "live"], capture_output=True, timeout=10).returncode != 0,
        timeout_s=20,
        interval_s=0.1,
        description="the live view to exit on Ctrl-C",
    )
