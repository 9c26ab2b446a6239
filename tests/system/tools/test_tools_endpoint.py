"""The tools, as separate processes, find an end point's driver with no ``--dir``.

The end point is configured with defaults (only its port is chosen); ``AERON_DIR`` moves the default directory
of both the end point and the tools into the test's own directory, so the real default is never touched.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from driver.tools import exporter
from driver.tools.stat import CounterSource
from endpoint import ServerConfiguration
from support.endpoints import (
    Chat,
    client_config,
    connected_client,
    free_server_port,
    running_server,
    server_config,
    wait_until,
)
from support.promtool import promtool_check_metrics
from support.waiting import execute_until

pytestmark = pytest.mark.process


def tools(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "driver.tools", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=dict(os.environ),
    )


async def test_tools_find_a_default_end_point(monkeypatch: pytest.MonkeyPatch, aeron_dir: Path) -> None:
    monkeypatch.setenv("AERON_DIR", str(aeron_dir))
    config = ServerConfiguration(port=free_server_port())
    assert config.aeron_dir is None
    async with running_server(config):
        assert (aeron_dir / "cnc.dat").is_file()
        driver = await asyncio.to_thread(tools, "driver", "--json")
        assert driver.returncode == 0, driver.stdout + driver.stderr
        status = json.loads(driver.stdout)
        assert status["alive"] is True
        assert Path(status["directory"]) == aeron_dir
        stat = await asyncio.to_thread(tools, "stat", "--json")
        assert stat.returncode == 0, stat.stderr
        labels = [c["label"] for c in json.loads(stat.stdout)["counters"]]
        assert any(label.startswith("Bytes sent") for label in labels), labels
    after = await asyncio.to_thread(tools, "driver", "-q")
    assert after.returncode == 1


@pytest.fixture
def client_dir(aeron_dir: Path) -> Iterator[Path]:
    path = aeron_dir.with_name(f"{aeron_dir.name[:40]}-client-{uuid.uuid4().hex[:8]}")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def scrape(directory: Path) -> str:
    """One Prometheus-format scrape of the exporter on ``directory``, as Prometheus would take it."""
    server = exporter.MetricsServer(CounterSource(directory), ("127.0.0.1", 0))
    server.start_background()
    try:
        host, port = server.address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
            return str(response.read().decode())
    finally:
        server.shutdown()


async def test_exporter_on_end_points_passes_promtool(aeron_dir: Path, client_dir: Path) -> None:
    """A server and a UDP client exchanging messages: every family is well formed and the positions carry
    their stream, session and channel."""
    port = free_server_port()
    async with running_server(server_config(aeron_dir, port)) as server:
        received: list[object] = []
        server.on_message(Chat)(lambda connection, message: received.append(message))
        async with connected_client(client_config("udp", aeron_dir, client_dir), port) as (_, connection):
            for i in range(20):
                await connection.send(Chat(f"hello {i}"))
            await wait_until(lambda: len(received) == 20, timeout=20, what="20 messages at the server")
            for directory in (aeron_dir, client_dir):
                text = await asyncio.to_thread(scrape, directory)
                await asyncio.to_thread(promtool_check_metrics, text)
                lines = text.splitlines()
                assert "aeron_driver_up 1" in lines
                sent = [line for line in lines if line.startswith("aeron_driver_sent_bytes_total ")]
                assert len(sent) == 1
                assert int(sent[0].split()[1]) > 0
                assert "# TYPE aeron_driver_sent_bytes_total counter" in lines
                positions = [line for line in lines if line.startswith("aeron_subscriber_position_bytes{")]
                assert positions
                assert all('stream_id="' in p and 'session_id="' in p and 'channel="aeron:' in p for p in positions)
                assert not [line for line in lines if line.startswith("aeron_unclassified")]


# ------------------------------------------------------------------------------------------------ Grafana dashboard

_PROMQL_WORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
)


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and the variables' queries."""
    found: list[str] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            found.extend(target["expr"] for target in panel.get("targets", ()))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            found.append(query["query"] if isinstance(query, dict) else query)
    return found


def grafana_to_promql(expr: str) -> str:
    """What Grafana sends Prometheus: its variables replaced (``label_values(m, l)`` queries the series of m)."""
    match = re.fullmatch(r"label_values\((\w+),\s*\w+\)", expr)
    if match:
        return match[1]
    return expr.replace("$__rate_interval", "1m").replace("$instance", ".*")


def metric_names(promql: str) -> set[str]:
    """The metric names an expression selects: identifiers outside strings, label matchers, ranges and
    grouping clauses that are neither functions nor keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', promql)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*(?=\s*(\(?))", text):
        if match[1] == "(" or match[0] in _PROMQL_WORDS:
            continue
        names.add(match[0])
    return names


def test_metric_names_are_found_in_promql() -> None:
    expr = (
        'sum by (instance, reason) (rate(aeron_a_total{instance=~"x"}[5m])) - on(instance) group_right '
        'aeron_b{channel=~"aeron:ipc.*"}'
    )
    assert metric_names(expr) == {"aeron_a_total", "aeron_b"}


def test_grafana_dashboard_is_valid_promql() -> None:
    """Every expression parses as PromQL (promtool checks them as recording rules)."""
    dashboard = json.loads(exporter.grafana_dashboard())
    queries = [grafana_to_promql(q) for q in dashboard_queries(dashboard)]
    assert len(queries) > 20
    rules = {
        "groups": [{"name": "dashboard", "rules": [{"record": f"q:{i}", "expr": q} for i, q in enumerate(queries)]}]
    }
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus); CI installs it")
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as fh:
        json.dump(rules, fh)  # JSON is YAML
    try:
        done = subprocess.run([promtool, "check", "rules", fh.name], capture_output=True, text=True, timeout=60)
    finally:
        os.unlink(fh.name)
    assert done.returncode == 0, done.stdout + done.stderr


async def test_grafana_dashboard_names_only_exported_families(aeron_dir: Path, client_dir: Path) -> None:
    """Run the exporter on a server's driver and on a UDP client's (an IPC client on the server's too): every
    metric a dashboard query names is one those scrapes contain."""
    port = free_server_port()
    exported: set[str] = set()
    async with running_server(server_config(aeron_dir, port)) as server:
        received: list[object] = []
        server.on_message(Chat)(lambda connection, message: received.append(message))
        async with (
            connected_client(client_config("udp", aeron_dir, client_dir), port) as (_, udp),
            connected_client(client_config("ipc", aeron_dir, client_dir), port) as (_, ipc),
        ):
            for i in range(10):
                await udp.send(Chat(f"udp {i}"))
                await ipc.send(Chat(f"ipc {i}"))
            await wait_until(lambda: len(received) == 20, timeout=20, what="20 messages at the server")
            for directory in (aeron_dir, client_dir):
                # A connection's own counters come once it has lived a second (not in a connect storm's way).
                text = await asyncio.to_thread(
                    execute_until,
                    lambda d=directory: (lambda t: t if "aeron_endpoint_connection_rtt_seconds{" in t else None)(
                        scrape(d)
                    ),
                    timeout_s=30,
                    interval_s=0.2,
                    description=f"connection counters exported from {directory}",
                )
                exported |= {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines() if line[:1] != "#"}
    dashboard = json.loads(exporter.grafana_dashboard())
    named: set[str] = set()
    for query in dashboard_queries(dashboard):
        names = metric_names(grafana_to_promql(query))
        assert names, query
        named |= names
    assert named - exported == set()
    assert {"aeron_driver_sent_bytes_total", "aeron_subscriber_position_bytes"} <= named


# ------------------------------------------------------------------------------------------------ connections


def connections_json(directory: Path) -> dict[str, Any]:
    done = tools("connections", "-d", str(directory), "--json", "--interval", "0.2")
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


async def test_connections_lists_each_connection_with_rtt_rates_and_age(aeron_dir: Path, client_dir: Path) -> None:
    """A server with a UDP and an IPC client: ``aeron-tools connections`` sees every connection from its driver's
    counters, with peer, transport, a measured round trip, bytes and messages each way; a closed one is gone."""
    port = free_server_port()
    fast = {"ping_interval": 0.1, "peer_timeout": 5.0}
    async with running_server(server_config(aeron_dir, port, **fast)) as server:
        received: list[object] = []
        server.on_message(Chat)(lambda connection, message: received.append(message))
        async with connected_client(client_config("udp", aeron_dir, client_dir, **fast), port) as (_, udp):
            async with connected_client(client_config("ipc", aeron_dir, client_dir, **fast), port) as (_, ipc):
                for i in range(25):
                    await udp.send(Chat(f"udp {i}"))
                    await ipc.send(Chat(f"ipc {i}"))
                await wait_until(lambda: len(received) == 50, timeout=20, what="50 messages at the server")

                def measured(doc: dict[str, Any]) -> bool:
                    rows = doc["connections"]
                    return len(rows) == 3 and all(r["rtt_ns"] is not None and r["rtt_ns"] > 0 for r in rows)

                doc = await asyncio.to_thread(
                    execute_until,
                    lambda: (lambda d: d if measured(d) else None)(connections_json(aeron_dir)),
                    timeout_s=30,
                    interval_s=0.1,
                    description="three connections with a round trip",
                )
                rows = {(r["role"], r["transport"]): r for r in doc["connections"]}
                assert set(rows) == {("server", "udp"), ("server", "ipc"), ("client", "ipc")}
                server_udp = rows[("server", "udp")]
                assert server_udp["peer"].startswith("127.0.0.1:")
                assert server_udp["id"] == udp.id
                assert server_udp["pid"] == os.getpid()
                assert server_udp["messages_received"] >= 25
                assert server_udp["bytes_received"] > 0
                assert server_udp["bytes_sent"] is not None
                assert server_udp["headroom"] > 0
                assert server_udp["age_s"] >= 0
                assert set(server_udp["rates"]) >= {"messages_in", "messages_out", "bytes_in", "bytes_out"}
                assert rows[("client", "ipc")]["messages_sent"] >= 25
                assert rows[("client", "ipc")]["id"] == ipc.id

                client_side = await asyncio.to_thread(connections_json, client_dir)
                assert [(r["role"], r["transport"], r["id"]) for r in client_side["connections"]] == [
                    ("client", "udp", udp.id)
                ]
                text = await asyncio.to_thread(scrape, aeron_dir)
                await asyncio.to_thread(promtool_check_metrics, text)
                rtts = [line for line in text.splitlines() if line.startswith("aeron_endpoint_connection_rtt_seconds{")]
                assert len(rtts) == 3
            # The IPC client closed: its connection's counters (both ends') are freed.
            after = await asyncio.to_thread(
                execute_until,
                lambda: (lambda d: d if len(d["connections"]) == 1 else None)(connections_json(aeron_dir)),
                timeout_s=30,
                interval_s=0.1,
                description="only the UDP connection left",
            )
            assert after["connections"][0]["transport"] == "udp"
    done = await asyncio.to_thread(tools, "connections", "-d", str(aeron_dir), "--once", "--interval", "0.1")
    assert done.returncode == 1
    assert "no such directory" in done.stderr or "cnc.dat" in done.stderr


async def test_a_server_keeps_its_own_figures_in_the_counters_file(aeron_dir: Path, client_dir: Path) -> None:
    """Connections, handshake packets and drops by reason, exported as families of their own."""
    port = free_server_port()
    async with running_server(server_config(aeron_dir, port)) as server:
        async with connected_client(client_config("udp", aeron_dir, client_dir), port):

            def exported() -> dict[str, float] | None:
                text = scrape(aeron_dir)
                values = {
                    line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                    for line in text.splitlines()
                    if line.startswith("aeron_endpoint_") and not line.startswith("aeron_endpoint_connection_")
                }
                labels = f'role="server",port="{port}",pid="{os.getpid()}"'
                ready = values.get(f"aeron_endpoint_connections{{{labels}}}") == 1
                return values if ready and values.get(f"aeron_endpoint_handshake_packets_total{{{labels}}}") else None

            values = await asyncio.to_thread(
                execute_until, exported, timeout_s=30, interval_s=0.2, description="the server's counters"
            )
            labels = f'role="server",port="{port}",pid="{os.getpid()}"'
            assert values[f"aeron_endpoint_handshake_packets_total{{{labels}}}"] >= 2  # HELLO and DONE at least
            assert values[f"aeron_endpoint_decode_errors_total{{{labels}}}"] == 0
            assert f'aeron_endpoint_handshake_drops_total{{{labels},reason="replayed"}}' in values
            assert values[f"aeron_endpoint_handshakes_accepted_total{{{labels}}}"] == 1
            assert values[f'aeron_endpoint_rejections_total{{{labels},reason="server_full"}}'] == 0
            assert len(server.endpoint_counters) > 0
            await asyncio.to_thread(promtool_check_metrics, await asyncio.to_thread(scrape, aeron_dir))
        assert server.endpoint_counters.failures == 0
