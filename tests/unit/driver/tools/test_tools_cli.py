"""The tools' CLI against hand-built driver directories: outputs, filters, health and every unreadable state."""

from __future__ import annotations

import io
import json
import re
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.cnc import CNC_FILE, CncGeneration
from driver.concurrent.system_counters import SUBSCRIBER_POSITION_TYPE_ID
from driver.tools import exporter, families
from driver.tools.cli import main
from driver.tools.common import format_java_time
from driver.tools.stat import CounterSource, Snapshot, format_aeronstat, rates
from support.promtool import promtool_check_metrics
from support.tool_dirs import IPC, UDP, FakeDriverDir


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeDriverDir]:
    directory = FakeDriverDir(tmp_path / "aeron")
    try:
        yield directory
    finally:
        directory.close()


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


# ------------------------------------------------------------------------------------------------ stat


def test_stat_once_lists_every_counter_with_id_value_type_label(fake: FakeDriverDir) -> None:
    code, text = run("stat", "-d", str(fake.directory), "--once")
    assert code == 0
    assert "CnC v15" in text
    assert re.search(r"^\s+0\s+123,456\s+0 system\s+Bytes sent$", text, re.M)
    assert re.search(rf"^\s+{fake.ipc_sub_pos}\s+1,024\s+4 sub-pos\s+sub-pos: 9 11 1001 aeron:ipc @0$", text, re.M)
    assert re.search(rf"^\s+{fake.heartbeat_id}\s+\S+\s+11 client-heartbeat\s+client-heartbeat: 7$", text, re.M)


def test_stat_aeronstat_format_is_javas(fake: FakeDriverDir) -> None:
    code, text = run("stat", "-d", str(fake.directory), "--once", "--format", "aeronstat")
    assert code == 0
    lines = text.splitlines()
    assert re.fullmatch(r"\d\d:\d\d:\d\d - Aeron Stat \(CnC v15\), pid \d+", lines[0])
    assert lines[1] == "=" * 70
    assert lines[2] == "  0:              123,456 - Bytes sent"
    assert lines[-1] == "--"


def test_stat_json(fake: FakeDriverDir) -> None:
    code, text = run("stat", "-d", str(fake.directory), "--json")
    assert code == 0
    doc = json.loads(text)
    assert doc["cnc_version"] == 15
    by_id = {c["id"]: c for c in doc["counters"]}
    assert by_id[0] == {"id": 0, "value": 123456, "type_id": 0, "type": "system", "label": "Bytes sent"}
    sub = by_id[fake.udp_sub_a]
    assert (sub["registration_id"], sub["session_id"], sub["stream_id"], sub["channel"]) == (14, 22, 2002, UDP)
    assert by_id[fake.udp_channel]["channel"] == UDP[:-4]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--type", "4"], {"sub-pos"}),
        (["--type", "sub-pos", "--type", "pub-pos"], {"sub-pos", "pub-pos"}),
        (["--label", "^NAKs"], {"system"}),
        (["--channel", "udp", "--type", "5"], {"rcv-pos"}),
        (["--session", "11"], {"pub-pos", "pub-lmt", "sub-pos"}),
        (["--stream", "2002", "--type", "3"], {"rcv-hwm"}),
    ],
)
def test_stat_filters(fake: FakeDriverDir, args: list[str], expected: set[str]) -> None:
    code, text = run("stat", "-d", str(fake.directory), "--json", *args)
    assert code == 0
    counters = json.loads(text)["counters"]
    assert counters
    assert {c["type"] for c in counters} == expected


def test_stat_channel_filter_matches_channel_status_counters(fake: FakeDriverDir) -> None:
    # 1.15.1 stores a channel-status key without the channel's last 4 bytes; we read what is stored, as Java does.
    code, text = run("stat", "-d", str(fake.directory), "--json", "--channel", "localhost:4$")
    assert code == 0
    ids = {c["id"] for c in json.loads(text)["counters"]}
    assert fake.udp_channel in ids
    assert fake.ipc_pub_pos not in ids


def test_stat_bad_filters_are_one_line_errors(fake: FakeDriverDir, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("stat", "-d", str(fake.directory), "--once", "--type", "nonsense")[0] == 1
    assert run("stat", "-d", str(fake.directory), "--once", "--label", "(")[0] == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert "--type 'nonsense'" in err[0]
    assert "invalid regular expression" in err[1]


def test_stat_count_prints_rates(fake: FakeDriverDir) -> None:
    ticks = iter(range(0, 10_000_000_000, 1_000_000_000))
    source = CounterSource(fake.directory, monotonic_ns=lambda: next(ticks))
    try:
        first = source.snapshot()
        fake.set_value(fake.ipc_pub_pos, 4096 + 2048)
        second = source.snapshot()
    finally:
        source.close()
    per_second = rates(first, second)
    assert per_second[fake.ipc_pub_pos] == 2048.0
    assert per_second[0] == 0.0
    code, text = run("stat", "-d", str(fake.directory), "--count", "2", "--interval", "0.01")
    assert code == 0
    assert text.count("RATE/S") == 1  # only the second table has a previous reading to compare with


def test_source_remaps_a_replaced_cnc(tmp_path: Path) -> None:
    first = FakeDriverDir(tmp_path / "d")
    source = CounterSource(tmp_path / "d")
    try:
        assert source.snapshot().pid > 0
        first.close()
        second = FakeDriverDir(tmp_path / "d", heartbeat_age_ms=5)
        try:
            second.set_value(0, 42)
            assert source.snapshot().counters[0].value == 42
        finally:
            second.close()
    finally:
        source.close()


# ------------------------------------------------------------------------------------------------ errors, loss


def test_errors_text_is_error_stats(fake: FakeDriverDir) -> None:
    fake.error_log.record("io.aeron.exceptions.ConductorServiceTimeoutException: test error")
    code, text = run("errors", "-d", str(fake.directory))
    assert code == 0
    when = format_java_time(fake.now_ms)
    assert text == (
        f"***\n2 observations from {when} to {when} for:\n"
        " io.aeron.exceptions.ConductorServiceTimeoutException: test error\n"
        "\n1 distinct errors observed.\n"
    )
    doc = json.loads(run("errors", "-d", str(fake.directory), "--json")[1])
    assert doc["distinct_errors"] == 1
    assert doc["errors"][0]["observation_count"] == 2


def test_java_time_format() -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}[+-]\d{4}", format_java_time(1_700_000_000_123))
    assert format_java_time(1_700_000_000_123).split(".")[1][:3] == "123"


def test_loss_text_is_loss_stats(fake: FakeDriverDir) -> None:
    code, text = run("loss", "-d", str(fake.directory))
    assert code == 0
    first, last = format_java_time(fake.now_ms - 2000), format_java_time(fake.now_ms - 1000)
    assert text.splitlines() == [
        "#OBSERVATION_COUNT, TOTAL_BYTES_LOST, FIRST_OBSERVATION, LAST_OBSERVATION, SESSION_ID, STREAM_ID, "
        "CHANNEL, SOURCE",
        f"2,160,{first},{last},22,2002,{UDP},/127.0.0.1:40786",
        "1 entries read",
    ]
    doc = json.loads(run("loss", "-d", str(fake.directory), "--json")[1])
    assert doc["entries"][0]["total_bytes_lost"] == 160


def test_loss_without_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = FakeDriverDir(tmp_path / "d")
    try:
        (tmp_path / "d" / "loss-report.dat").unlink()
        assert run("loss", "-d", str(tmp_path / "d"))[0] == 1
        assert "no loss-report.dat" in capsys.readouterr().err
    finally:
        directory.close()


# ------------------------------------------------------------------------------------------------ streams


def test_streams_positions_and_lags(fake: FakeDriverDir) -> None:
    code, text = run("streams", "-d", str(fake.directory), "--json")
    assert code == 0
    streams = {(s["channel"], s["stream_id"]): s for s in json.loads(text)["streams"]}
    ipc = streams[(IPC, 1001)]
    assert ipc["session_id"] == 11
    assert ipc["publisher_position"] == 4096
    assert ipc["subscriber_positions"] == {"9": 1024}
    assert ipc["lags"] == {"end_to_end": 3072}
    udp = streams[(UDP, 2002)]
    assert udp["lags"] == {
        "publisher_to_sender": 1000,
        "sender_to_receiver": 500,
        "receiver_hwm_to_receiver": 300,
        "receiver_to_subscriber": 1500,
        "end_to_end": 3000,
    }
    code, text = run("streams", "-d", str(fake.directory))
    assert "aeron:ipc  stream 1001  session 11" in text
    assert "lag         end to end 3,072" in text
    code, text = run("streams", "-d", str(fake.directory), "--format", "streamstat")
    assert (
        f"sessionId=11 streamId=1001 channel={IPC} : pub-pos (sample):8:4096 pub-lmt:8:69632 sub-pos:9:1024\n" in text
    )


# ------------------------------------------------------------------------------------------------ driver health


def test_driver_alive(fake: FakeDriverDir) -> None:
    code, text = run("driver", "-d", str(fake.directory))
    assert code == 0
    assert text.startswith("driver: ALIVE")
    assert "clients:         1" in text
    doc = json.loads(run("driver", "-d", str(fake.directory), "--json")[1])
    assert doc["alive"] is True
    assert doc["client_count"] == 1
    assert doc["distinct_errors"] == 1
    assert doc["cnc_version"] == 15
    assert 0 <= doc["heartbeat_age_ms"] < 60_000


def test_driver_dead_when_heartbeat_is_stale(tmp_path: Path) -> None:
    stale = FakeDriverDir(tmp_path / "d", heartbeat_age_ms=60_000)
    try:
        code, text = run("driver", "-d", str(tmp_path / "d"))
        assert code == 1
        assert text.startswith("driver: DEAD")
        assert run("driver", "-d", str(tmp_path / "d"), "--timeout-ms", "120000", "-q") == (0, "")
    finally:
        stale.close()


def test_current_generation_directory_is_read(tmp_path: Path) -> None:
    current = FakeDriverDir(tmp_path / "d", generation=CncGeneration.CURRENT)
    try:
        assert run("driver", "-d", str(tmp_path / "d"), "-q")[0] == 0
        assert "CnC v512" in run("stat", "-d", str(tmp_path / "d"), "--once")[1]
    finally:
        current.close()


# ---------------------------------------------------------------------------------------- unreadable directories

ALL_COMMANDS = ["stat --once", "errors", "streams", "driver", "stat --json"]


def _expect_one_line_error(capsys: pytest.CaptureFixture[str], directory: Path, needle: str) -> None:
    for command in ALL_COMMANDS:
        code, out = run(*command.split(), "-d", str(directory))
        captured = capsys.readouterr()
        assert code == 1, command
        if command == "driver":
            assert needle in out
        else:
            assert out == ""
            lines = captured.err.strip().splitlines()
            assert len(lines) == 1, captured.err
            assert needle in lines[0]
            assert "Traceback" not in captured.err


def test_absent_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _expect_one_line_error(capsys, tmp_path / "nope", "no such directory")
    assert run("loss", "-d", str(tmp_path / "nope"))[0] == 1
    assert "no such directory" in capsys.readouterr().err


def test_directory_without_cnc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _expect_one_line_error(capsys, tmp_path, "no cnc.dat")


def test_empty_cnc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / CNC_FILE).write_bytes(b"")
    _expect_one_line_error(capsys, tmp_path, "empty")


def test_cnc_being_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    creating = FakeDriverDir(tmp_path / "d", ready=False)
    try:
        _expect_one_line_error(capsys, tmp_path / "d", "CnC version 0")
    finally:
        creating.close()


def test_unknown_cnc_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = FakeDriverDir(tmp_path / "d")
    try:
        other.cnc.metadata_buffer.put_int_volatile(0, 14)
        _expect_one_line_error(capsys, tmp_path / "d", "version 14")
    finally:
        other.close()


@pytest.mark.parametrize("keep", [64, 4096])
def test_truncated_cnc(tmp_path: Path, capsys: pytest.CaptureFixture[str], keep: int) -> None:
    whole = FakeDriverDir(tmp_path / "d")
    data = (tmp_path / "d" / CNC_FILE).read_bytes()
    whole.close()
    (tmp_path / "d" / CNC_FILE).unlink()
    (tmp_path / "d" / CNC_FILE).write_bytes(data[:keep])
    _expect_one_line_error(capsys, tmp_path / "d", "truncated")


def test_garbage_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / CNC_FILE).write_bytes(struct.pack("<i", 15) + b"\xff" * 4092)
    _expect_one_line_error(capsys, tmp_path, "cnc.dat")


def test_not_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    _expect_one_line_error(capsys, tmp_path / "file", "not a directory")


# ------------------------------------------------------------------------------------------------ exporter


def _snapshot(fake: FakeDriverDir) -> Snapshot:
    source = CounterSource(fake.directory)
    try:
        return source.snapshot()
    finally:
        source.close()


def test_openmetrics_rendering(fake: FakeDriverDir) -> None:
    text = exporter.render_metrics(fake.directory, _snapshot(fake), None, 1, 10_000, openmetrics=True)
    lines = text.splitlines()
    assert lines[-1] == "# EOF"
    assert "aeron_driver_up 1" in lines
    assert "# TYPE aeron_driver_sent_bytes counter" in lines
    assert "# UNIT aeron_driver_sent_bytes bytes" in lines
    assert "aeron_driver_sent_bytes_total 123456" in lines
    assert "# TYPE aeron_subscriber_position_bytes gauge" in lines
    sub = (
        'aeron_subscriber_position_bytes{registration_id="9",session_id="11",stream_id="1001",channel="aeron:ipc"} 1024'
    )
    assert sub in lines
    assert 'aeron_driver_images_refused_total{reason="term_length"} 0' in lines
    assert "aeron_driver_distinct_errors 1" in lines
    families = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert len(families) == len(set(families))
    for line in lines:
        if not line.startswith("#"):
            assert re.fullmatch(r'[a-z_]+(\{([a-z_]+="([^"\\]|\\.)*",?)*\})? -?[0-9.e+-]+', line), line
    prometheus = exporter.render_metrics(fake.directory, _snapshot(fake), None, 1, 10_000, openmetrics=False)
    assert "# EOF" not in prometheus
    assert "# TYPE aeron_driver_info gauge" in prometheus
    assert "# TYPE aeron_driver_sent_bytes_total counter" in prometheus.splitlines()


def test_every_family_follows_prometheus_naming() -> None:
    """Counters end in ``_total`` only as samples; units are base units at the end of the name; no name twice."""
    names = [family.name for family in families.FAMILIES]
    assert len(names) == len(set(names))
    for family in families.FAMILIES:
        assert re.fullmatch(r"aeron_[a-z0-9_]+", family.name), family.name
        assert not family.name.endswith("_total")
        assert "counter" not in family.name.split("_")
        assert "gauge" not in family.name.split("_")
        if family.unit:
            assert family.unit in ("bytes", "seconds")
            assert family.name.endswith(f"_{family.unit}"), family
        assert family.help.endswith(".")
        assert families.family_named(family.sample_name) is family


def test_counters_are_classified_by_kind(fake: FakeDriverDir) -> None:
    """Every counter of the fake driver lands in a known family: none is left unclassified."""
    for sample in _snapshot(fake).counters:
        family, labels = families.classify(sample)
        assert family not in (families.UNCLASSIFIED, families.UNCLASSIFIED_SYSTEM), sample
        if sample.type_id == SUBSCRIBER_POSITION_TYPE_ID:
            assert dict(labels)["stream_id"] == str(sample.stream_id)


def test_exposition_passes_promtool(fake: FakeDriverDir) -> None:
    promtool_check_metrics(exporter.render_metrics(fake.directory, _snapshot(fake), None, 1, 10_000, openmetrics=False))
    promtool_check_metrics(exporter.render_metrics(fake.directory, None, "no cnc.dat", None, 10_000, openmetrics=False))


def test_label_escaping() -> None:
    assert exporter.escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_exporter_without_a_driver(tmp_path: Path) -> None:
    text = exporter.render_metrics(tmp_path, None, "no cnc.dat", None, 10_000)
    assert "aeron_driver_up 0" in text
    assert 'reason="no cnc.dat"' in text


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:0", ("127.0.0.1", 0)), (":9464", ("0.0.0.0", 9464)), ("[::1]:80", ("::1", 80))],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert exporter.parse_address(text) == expected


def test_parse_bad_address() -> None:
    with pytest.raises(exporter.ToolError):
        exporter.parse_address("localhost")


def test_exporter_serves_fresh_values_on_each_scrape(fake: FakeDriverDir) -> None:
    server = exporter.MetricsServer(CounterSource(fake.directory), ("127.0.0.1", 0))
    server.start_background()
    try:
        host, port = server.address
        url = f"http://{host}:{port}/metrics"
        request = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers["Content-Type"].startswith("application/openmetrics-text")
            first = response.read().decode()
        fake.set_value(0, 999)
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            second = response.read().decode()
        assert "aeron_driver_sent_bytes_total 123456" in first
        assert "aeron_driver_sent_bytes_total 999" in second
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://{host}:{port}/other", timeout=10)
    finally:
        server.shutdown()


def test_format_aeronstat_clock_and_pid(fake: FakeDriverDir) -> None:
    snapshot = _snapshot(fake)
    text = format_aeronstat(snapshot)
    assert f"pid {snapshot.pid}" in text.splitlines()[0]
    assert time.strftime("%H:%M", time.localtime(snapshot.epoch_ms / 1000)) in text.splitlines()[0]


def test_grafana_prints_or_writes_the_dashboard(tmp_path: Path) -> None:
    code, text = run("grafana")
    assert code == 0
    dashboard = json.loads(text)
    assert dashboard["title"] == "Aeron driver and end points"
    assert run("grafana", "-o", str(tmp_path / "d.json")) == (0, "")
    assert json.loads((tmp_path / "d.json").read_text()) == dashboard
    assert run("grafana", "-o", str(tmp_path / "missing" / "d.json"))[0] == 1
