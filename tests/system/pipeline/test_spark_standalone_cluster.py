"""The game example's Spark job submitted, unchanged, to a real Spark standalone cluster on 127.0.0.1.

A master and a worker run as separate processes (``spark-class ...deploy.master.Master`` and
``...deploy.worker.Worker`` from the pyspark package); ``spark-submit --master spark://...``
runs ``examples/player_stats_job.py`` against a recording made by ``examples/game_recording.py``
in the same directory tree (the "shared storage"). Every process is stopped at the end.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
SPARK_HOME = Path(pyspark.__file__).resolve().parent
BOUND = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(tmp_path / "logs"),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    env.pop("PYSPARK_GATEWAY_PORT", None)
    return env


def _wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            raise AssertionError(f"{process.args!r} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in {log} within {BOUND}s:\n{log.read_text()[-3000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(20)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """A master and one worker (2 cores, 2 GiB); yields the master URL."""
    env = _env(tmp_path)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port = _free_port()
    master_log = tmp_path / "master.log"
    worker_log = tmp_path / "worker.log"
    started: list[subprocess.Popen[bytes]] = []
    try:
        with master_log.open("wb") as out:
            master = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", str(_free_port())],
                env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        started.append(master)
        _wait_for_line(master_log, "I have been elected leader", master)
        url = f"spark://127.0.0.1:{port}"
        with worker_log.open("wb") as out:
            worker = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "2",
                 "--memory", "2g", "--webui-port", str(_free_port()), "--work-dir", str(tmp_path / "work")],
                env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        started.append(worker)
        _wait_for_line(worker_log, "Successfully registered with master", worker)
        yield url
    finally:
        for process in reversed(started):
            _stop(process)


# Three JVMs start (master, worker, the submitted driver and its executor) on a machine shared with other work:
# the test's own waits bound it (120 s each to start, 360 s for the job), not the suite's default per-test limit.
@pytest.mark.timeout(8 * BOUND)
def test_the_game_job_runs_unchanged_on_a_standalone_cluster(cluster: str, tmp_path: Path) -> None:
    archive = tmp_path / "shared" / "archive"
    recorded = subprocess.run(
        [sys.executable, str(EXAMPLES / "game_recording.py"), "--players", "8", "--ticks", "250",
         "--archive-dir", str(archive), "--no-spark"],
        capture_output=True, text=True, timeout=BOUND, cwd=ROOT,
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert "recorded 2000 PlayerState messages" in recorded.stdout
    submitted = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster, "--conf", "spark.executor.memory=1g",
         "--py-files", str(EXAMPLES / "messages.py"), str(EXAMPLES / "player_stats_job.py"), str(archive)],
        capture_output=True, text=True, timeout=3 * BOUND, cwd=ROOT, env=_env(tmp_path),
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr[-5000:]
    assert f"player stats: 2000 states of 8 players on {cluster}" in submitted.stdout, submitted.stdout
    player_lines = [
        line.split() for line in submitted.stdout.splitlines() if line.split()[:1] and line.split()[0].isdigit()
    ]
    assert sorted(int(fields[0]) for fields in player_lines) == list(range(8))
    assert all(int(fields[1]) == 250 for fields in player_lines)
