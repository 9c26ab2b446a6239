"""Today's Aeron (the C media driver and C client, 1.53) as a test peer, through PyPI's ``pyaeron``.

Theory of operation: ``pyaeron==0.1.0`` ships CPython bindings of the Aeron C
client and an embeddable C media driver, with wheels for CPython 3.12 and newer
only, while the project itself runs on 3.11. So the peer lives in a venv of its
own, made from the first CPython >= 3.12 found (``python3.12`` .. ``python3.15``
on PATH, then ``~/.pyenv/versions/3.1[2-5]*``, or the interpreter named by
``$ENDPOINT_PEER_PYTHON``), and peer scripts run in that venv as subprocesses.

The venv lives in ``$ENDPOINT_PEER_CACHE/aeron-c`` (default
``~/.cache/endpoint/aeron-c``). An exclusive file lock serialises the set-up;
the venv is built under a temporary name and renamed into place, so an
interrupted set-up is redone, never half-used. If no CPython >= 3.12 exists,
:meth:`AeronC.ensure` raises :class:`PeerUnavailableError` and the tests that
need the peer skip with that reason.

Peer processes start in their own session and are stopped by signalling that
process group only, by its id.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

__all__ = [
    "CACHE_ENV",
    "PEER_PYTHON_ENV",
    "PYAERON_REQUIREMENT",
    "AeronC",
    "PeerUnavailableError",
    "find_python312",
]

CACHE_ENV = "ENDPOINT_PEER_CACHE"
PEER_PYTHON_ENV = "ENDPOINT_PEER_PYTHON"
PYAERON_REQUIREMENT = "pyaeron==0.1.0"
_CANDIDATES = ("python3.12", "python3.13", "python3.14", "python3.15")
_CHECK = "import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)"


class PeerUnavailableError(RuntimeError):
    """The C peer cannot be set up here (no CPython >= 3.12, or pyaeron would not install)."""


def _cache_dir() -> Path:
    configured = os.environ.get(CACHE_ENV)
    base = Path(configured).expanduser() if configured else Path.home() / ".cache" / "endpoint"
    return base / "aeron-c"


def _is_312(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", _CHECK], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_python312() -> str | None:
    """The first CPython >= 3.12 on this machine, or None."""
    configured = os.environ.get(PEER_PYTHON_ENV)
    if configured:
        return configured if _is_312(configured) else None
    for name in _CANDIDATES:
        path = shutil.which(name)
        if path and _is_312(path):
            return path
    home = Path.home()
    for pattern in ("3.12*", "3.13*", "3.14*", "3.15*"):
        for path in sorted(glob.glob(str(home / ".pyenv" / "versions" / pattern / "bin" / "python3"))):
            if _is_312(path):
                return path
    return None


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with lock_path.open("a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


class AeronC:
    """A venv's python with pyaeron installed: runs peer scripts against a driver directory."""

    def __init__(self, python: Path) -> None:
        self.python = python

    @classmethod
    def ensure(cls, cache_dir: Path | None = None, *, timeout_s: float = 900.0) -> AeronC:
        cache = cache_dir or _cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
        venv = cache / "pyaeron-venv"
        python = venv / "bin" / "python"
        with _locked(cache / ".lock"):
            if python.exists() and _is_312(str(python)):
                return cls(python)
            base = find_python312()
            if base is None:
                raise PeerUnavailableError(
                    f"no CPython >= 3.12 found ({', '.join(_CANDIDATES)} on PATH, ~/.pyenv/versions, "
                    f"or ${PEER_PYTHON_ENV}); {PYAERON_REQUIREMENT} has wheels for 3.12+ only"
                )
            partial = cache / "pyaeron-venv.partial"
            shutil.rmtree(partial, ignore_errors=True)
            shutil.rmtree(venv, ignore_errors=True)
            try:
                subprocess.run([base, "-m", "venv", str(partial)], check=True, capture_output=True, timeout=timeout_s)
                subprocess.run(
                    [str(partial / "bin" / "python"), "-m", "pip", "install", "-q", PYAERON_REQUIREMENT],
                    check=True,
                    capture_output=True,
                    timeout=timeout_s,
                    env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
                )
            except (OSError, subprocess.SubprocessError) as exc:
                failed = isinstance(exc, subprocess.CalledProcessError) and exc.stderr
                detail = exc.stderr.decode(errors="replace")[-2000:] if failed else ""
                shutil.rmtree(partial, ignore_errors=True)
                raise PeerUnavailableError(
                    f"could not install {PYAERON_REQUIREMENT} with {base}: {exc} {detail}"
                ) from exc
            partial.rename(venv)
        return cls(python)

    def command(self, script: Path | str, *args: str) -> list[str]:
        return [str(self.python), str(script), *args]

    def start(
        self, script: Path | str, *args: str, log_path: Path, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start a peer script in its own session, output to ``log_path``."""
        with log_path.open("ab") as sink:
            return subprocess.Popen(
                self.command(script, *args),
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )

    def run(self, script: Path | str, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run a peer script to completion (bounded); returns its output, never raises on exit code."""
        proc = subprocess.Popen(
            self.command(script, *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.stop(proc)
            out, err = proc.communicate()
            err += f"\n[peer timed out after {timeout_s} s]"
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    @staticmethod
    def stop(proc: subprocess.Popen[bytes] | subprocess.Popen[str], timeout_s: float = 10.0) -> int:
        """SIGTERM the peer's process group (by its id), SIGKILL if it lingers."""
        if proc.poll() is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        return proc.returncode if proc.returncode is not None else -9


def _main(argv: Sequence[str]) -> int:
    """``python tests/support/aeron_c.py script.py args...``: run a peer script in the venv."""
    peer = AeronC.ensure()
    return subprocess.call(peer.command(*argv))


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
