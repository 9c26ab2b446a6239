"""``stat --serve HOST:PORT``: the driver's counters for Prometheus, in the OpenMetrics text format.

Theory of operation: every scrape of ``/metrics`` takes one snapshot of the
counters (plain reads of cnc.dat's shared memory through a
:class:`~driver.tools.stat.CounterSource`) and renders it; nothing runs
between scrapes and nothing is written to the driver's files, so scraping
never touches the driver's hot path. While no driver is readable the endpoint
still answers, with ``aeron_driver_up 0`` and the reason in an info metric.

Families:

* ``aeron_driver_up`` — 1 when the cnc.dat is readable and the heartbeat is fresh;
* ``aeron_driver_heartbeat_age_seconds``, ``aeron_driver_info{cnc_version, pid, directory}``,
  ``aeron_driver_distinct_errors``;
* one family per kind of counter, as :mod:`driver.tools.families` classifies them: monotonic
  counts as ``*_total`` counters (``aeron_driver_sent_bytes_total``, ``aeron_driver_naks_sent_total``
  ...), positions and limits as gauges labelled by stream, session and channel
  (``aeron_subscriber_position_bytes{registration_id, session_id, stream_id, channel}`` ...).

Clients that ask for OpenMetrics (``Accept: application/openmetrics-text``) get
it, ending in ``# EOF``; others get the Prometheus 0.0.4 text format, which is
the same lines without the terminator.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path

from driver.concurrent.error_log import read_error_log
from driver.errors import DriverError
from driver.tools.common import ToolError
from driver.tools.families import FAMILIES, Family, Labels, classify
from driver.tools.stat import CounterSample, CounterSource, Snapshot

__all__ = [
    "OPENMETRICS_CONTENT_TYPE",
    "PROMETHEUS_CONTENT_TYPE",
    "MetricsServer",
    "escape_label_value",
    "grafana_dashboard",
    "parse_address",
    "render_metrics",
]

OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GRAFANA_DASHBOARD = "aeron-driver.json"
"""The dashboard shipped beside this module, under ``grafana/``."""


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: list[tuple[str, object]]) -> str:
    return "{" + ",".join(f'{name}="{escape_label_value(str(value))}"' for name, value in pairs) + "}"


def _info_family(name: str, help_text: str, openmetrics: bool) -> list[str]:
    """OpenMetrics has an info type (family ``name``, sample ``name_info``); Prometheus 0.0.4 uses a gauge."""
    if openmetrics:
        return [f"# TYPE {name} info", f"# HELP {name} {help_text}"]
    return [f"# TYPE {name}_info gauge", f"# HELP {name}_info {help_text}"]


def _header(family: Family, openmetrics: bool) -> list[str]:
    """TYPE, UNIT and HELP: OpenMetrics names the family (no ``_total``); Prometheus 0.0.4 names the samples."""
    name = family.name if openmetrics else family.sample_name
    lines = [f"# TYPE {name} {family.kind}"]
    if openmetrics and family.unit:
        lines.append(f"# UNIT {name} {family.unit}")
    lines.append(f"# HELP {name} {family.help}")
    return lines


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(value)


def _render_counters(counters: list[CounterSample], openmetrics: bool) -> list[str]:
    """One block per family, in catalogue order; a label set seen twice in a family gets the counter id too."""
    grouped: dict[Family, list[tuple[Labels, CounterSample]]] = {}
    for sample in counters:
        family, labels = classify(sample)
        grouped.setdefault(family, []).append((labels, sample))
    out: list[str] = []
    for family in FAMILIES:
        members = grouped.get(family)
        if not members:
            continue
        out.extend(_header(family, openmetrics))
        seen: set[Labels] = set()
        for labels, sample in members:
            if labels in seen:
                labels = (*labels, ("counter_id", str(sample.counter_id)))
            seen.add(labels)
            value: float = sample.value if family.scale == 1.0 else sample.value * family.scale
            shown = _labels(list(labels)) if labels else ""
            out.append(f"{family.sample_name}{shown} {_number(value)}")
    return out


def render_metrics(
    directory: Path,
    snapshot: Snapshot | None,
    problem: str | None,
    distinct_errors: int | None,
    driver_timeout_ms: int,
    openmetrics: bool = True,
) -> str:
    """The exposition text for one scrape."""
    out: list[str] = []
    up = snapshot is not None and snapshot.heartbeat_age_ms <= driver_timeout_ms
    out.append("# TYPE aeron_driver_up gauge")
    out.append("# HELP aeron_driver_up 1 when the driver's cnc.dat is readable and its heartbeat is fresh.")
    out.append(f"aeron_driver_up {1 if up else 0}")
    if snapshot is None:
        pairs: list[tuple[str, object]] = [("directory", directory), ("reason", problem or "unknown")]
        out.extend(_info_family("aeron_driver_problem", "Why the driver directory could not be read.", openmetrics))
        out.append(f"aeron_driver_problem_info{_labels(pairs)} 1")
    else:
        pairs = [("directory", directory), ("cnc_version", snapshot.cnc_version), ("pid", snapshot.pid)]
        out.extend(_info_family("aeron_driver", "The driver that owns this directory.", openmetrics))
        out.append(f"aeron_driver_info{_labels(pairs)} 1")
        out.append("# TYPE aeron_driver_heartbeat_age_seconds gauge")
        out.append("# UNIT aeron_driver_heartbeat_age_seconds seconds" if openmetrics else "")
        out.append("# HELP aeron_driver_heartbeat_age_seconds Time since the driver last stamped its heartbeat.")
        out.append(f"aeron_driver_heartbeat_age_seconds {snapshot.heartbeat_age_ms / 1000:.3f}")
        if distinct_errors is not None:
            out.append("# TYPE aeron_driver_distinct_errors gauge")
            out.append("# HELP aeron_driver_distinct_errors Distinct errors in the driver's error log.")
            out.append(f"aeron_driver_distinct_errors {distinct_errors}")
        out.extend(_render_counters(snapshot.counters, openmetrics))
    if openmetrics:
        out.append("# EOF")
    return "\n".join(line for line in out if line) + "\n"


def grafana_dashboard() -> str:
    """The Grafana dashboard (JSON) for a driver and its end points, built on this exporter's families."""
    return (resources.files("driver.tools") / "grafana" / GRAFANA_DASHBOARD).read_text(encoding="utf-8")


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too); port 0 picks a free one."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ToolError(f"--serve {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port_text)


class MetricsServer:
    """An HTTP server answering ``GET /metrics`` (and ``/``) with a fresh reading of the counters."""

    def __init__(
        self,
        source: CounterSource,
        address: tuple[str, int],
        driver_timeout_ms: int = 10_000,
    ) -> None:
        self.source = source
        self.driver_timeout_ms = driver_timeout_ms
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path not in ("/metrics", "/"):
                    self.send_error(404, "only /metrics is served")
                    return
                openmetrics = "application/openmetrics-text" in self.headers.get("Accept", "")
                body = server.scrape(openmetrics).encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", OPENMETRICS_CONTENT_TYPE if openmetrics else PROMETHEUS_CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Silent: a scrape every few seconds would flood the terminal."""

        self.httpd = ThreadingHTTPServer(address, Handler)
        self.httpd.daemon_threads = True

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def scrape(self, openmetrics: bool = True) -> str:
        """One reading; serialised because the source keeps a single mapping."""
        with self._lock:
            snapshot: Snapshot | None
            problem: str | None = None
            distinct: int | None = None
            try:
                snapshot = self.source.snapshot()
                cnc = self.source.cnc()
                distinct = len(read_error_log(cnc.error_log_buffer))
            except (ToolError, DriverError, ValueError) as exc:
                snapshot, problem = None, str(exc)
            return render_metrics(
                self.source.directory, snapshot, problem, distinct, self.driver_timeout_ms, openmetrics
            )

    def serve_forever(self, poll_interval_s: float = 0.5) -> None:
        self.httpd.serve_forever(poll_interval_s)

    def start_background(self) -> threading.Thread:
        """Serve on a daemon thread (tests, embedding); stop with :meth:`shutdown`."""
        thread = threading.Thread(target=self.serve_forever, name="aeron-metrics", daemon=True)
        thread.start()
        return thread

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.source.close()


def serve(
    source: CounterSource,
    address: tuple[str, int],
    driver_timeout_ms: int,
    announce: Callable[[str], None],
    stop_after_s: float | None = None,
) -> int:
    """Run the exporter until interrupted (or for ``stop_after_s``); announces its URL first."""
    try:
        server = MetricsServer(source, address, driver_timeout_ms)
    except OSError as exc:
        raise ToolError(f"--serve {address[0]}:{address[1]}: cannot listen: {exc.strerror or exc}") from None
    host, port = server.address
    shown = f"[{host}]" if ":" in host else host
    announce(f"serving OpenMetrics for {source.directory} on http://{shown}:{port}/metrics")
    try:
        if stop_after_s is None:
            server.serve_forever()
        else:
            server.start_background()
            time.sleep(stop_after_s)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0
