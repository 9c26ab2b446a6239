"""The end point benchmarks run end to end with ``--quick`` and print their tables (no timing is asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from support.benchmark_runs import run_benchmark

pytestmark = [pytest.mark.process, pytest.mark.slow]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
RUN_TIMEOUT_S = 240


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
@pytest.mark.parametrize(
    ("script", "titles"),
    [
        ("endpoint_throughput.py", ["End point throughput, one way"]),
        ("codec.py", ["Message codec, one process", "endpoint Move(seq, x, y)", "msgpack-python (seq, x, y)"]),
        ("endpoint_latency.py", ["End point round trip"]),
        (
            "endpoint_hostile.py",
            [
                "Under attack: a legitimate UDP client",
                "forged SETUPs",
                "never-completing HELLOs",
                "Ratios to no attack",
                "Sealed connections",
            ],
        ),
        (
            "endpoint_connections.py",
            ["(a) Handshakes per second", "concurrent IPC clients on one server", "(c) Idle CPU", "idle UDP clients"],
        ),
        ("game_server.py", ["Game server: inputs and snapshots", "End point / asyncio TCP + msgpack, same run"]),
        ("driver_send.py", ["floor: bare sendto", "python: 20 publications: data", "native: 20 publications: data"]),
        (
            "driver_feedback.py",
            ["send endpoint, 20 publications", "native µs/SM", "unicast", "min", "dynamic", "private"],
        ),
        (
            "rpc_calls.py",
            [
                "Unary RPC, price(Order(int, 32-byte str)) -> int",
                "ours IPC (busy_spin)",
                "ours UDP (busy_spin)",
                "grpcio aio, TCP 127.0.0.1",
                "grpcio aio, unix socket",
                "pyzmq DEALER/ROUTER, tcp://127.0.0.1",
                "pyzmq DEALER/ROUTER, ipc://",
                "Ratios ours / grpc and ours / zmq",
                "x grpc tcp",
                "x zmq ipc",
                "ours IPC, 64 in flight",
                "Bars (idle busy_spin, driver idle busy_spin, window 64)",
            ],
        ),
        (
            "stream_throughput.py",
            [
                "Stream throughput, 33,554,432 bytes client -> server",
                "ours IPC, send_stream",
                "ours IPC, send_stream + 8 KiB frames",
                "ours UDP, send_stream",
                "ours UDP, send_stream + 1 MiB window",
                "grpcio aio client streaming, TCP",
                "asyncio stream, TCP 127.0.0.1",
                "asyncio stream, unix socket",
                "Ratios ours / peer, MB/s",
                "x grpc tcp",
                "peak RSS",
            ],
        ),
        (
            "spark_read.py",
            [
                "Spark batch read, 50,000 rows of 32-byte payloads, local[2]",
                "endpoint-archive count",
                "parquet groupBy",
                "Ratio endpoint-archive / parquet",
            ],
        ),
    ],
)
def test_benchmark_quick_run(script: str, titles: list[str], tmp_path: Path) -> None:
    output = tmp_path / "output.txt"
    text = run_benchmark([sys.executable, str(BENCHMARKS / script), "--quick"], output, RUN_TIMEOUT_S)
    for title in titles:
        assert title in text, text[-3000:]
