"""Small Java programs compiled against the Aeron 1.15.1 jar and run on the peer's Java 11, for facts only Java knows.

Theory of operation: a test holds a Java source (a string) whose public class is ``main_class``. :func:`compile_java`
compiles it with the system ``javac --release 11`` (any JDK from 11 up; the peer's runtime is a JRE without a
compiler) against the peer's jar, into ``<peer cache>/java-programs/<hash>/``, where the hash covers the source, the
class name and the class path's file names. The same source is therefore compiled once per cache, whatever test or
process asks first: the set-up takes the peer cache's lock, compiles into a temporary directory beside the target
and renames it into place, so a half-compiled program is never used. :meth:`JavaProgram.run` runs the main class
on the Java 11 runtime of :class:`AeronJava` with the program's classes and the jar on the class path, bounded in
time, and returns what it printed.

Without ``javac`` the programs cannot be built: :class:`JavacUnavailableError` says so, and fixtures skip on it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from support.aeron_java import AeronJava, PeerSetupError, _locked, default_cache_dir, run_bounded

__all__ = ["SOURCES", "JavaProgram", "JavacUnavailableError", "compile_java", "find_javac", "sbe_encoder"]

JAVAC_ENV = "ENDPOINT_JAVAC"
"""Names the ``javac`` to use when it is not the one on ``PATH``."""


class JavacUnavailableError(PeerSetupError):
    """No ``javac`` (JDK 11 or newer) to compile the test programs with."""


def find_javac() -> str:
    configured = os.environ.get(JAVAC_ENV)
    javac = configured or shutil.which("javac")
    if not javac or not os.access(javac, os.X_OK):
        raise JavacUnavailableError(f"no javac found (set {JAVAC_ENV} or put a JDK >= 11 on PATH)")
    return javac


@dataclass(frozen=True)
class JavaProgram:
    """A compiled program: run its main class on the peer's Java 11 with the jar on the class path."""

    java: AeronJava
    classes: Path
    main_class: str

    def command(self, *args: str) -> list[str]:
        classpath = os.pathsep.join([str(self.classes), str(self.java.jar)])
        return [str(self.java.java), *self.java.jvm_options, "-cp", classpath, self.main_class, *args]

    def run(self, *args: str, input_text: str | None = None, timeout_s: float = 60.0) -> str:
        """Run to completion (bounded) and return stdout; a non-zero exit raises with what it printed."""
        proc = run_bounded(self.command(*args), self.main_class, timeout_s, input_text)
        out, err = proc.stdout, proc.stderr
        if proc.returncode != 0:
            raise RuntimeError(f"{self.main_class} exited with {proc.returncode}\n{out[-2000:]}\n{err[-4000:]}")
        return out


def compile_java(
    java: AeronJava,
    source: str,
    main_class: str,
    *,
    extra_classpath: Sequence[Path] = (),
    cache_dir: Path | None = None,
    timeout_s: float = 300.0,
) -> JavaProgram:
    """Compile ``source`` (public class ``main_class``, no package) once per cache and return the program."""
    classpath = [java.jar, *extra_classpath]
    key = hashlib.sha256("\0".join([main_class, source, *(p.name for p in classpath)]).encode("utf-8")).hexdigest()[:24]
    cache = (cache_dir or default_cache_dir()).expanduser().resolve()
    programs = cache / "java-programs"
    target = programs / key
    marker = target / ".complete"
    if marker.is_file():
        return JavaProgram(java, target, main_class)
    javac = find_javac()
    programs.mkdir(parents=True, exist_ok=True)
    with _locked(cache / ".lock"):
        if marker.is_file():
            return JavaProgram(java, target, main_class)
        with tempfile.TemporaryDirectory(dir=programs, prefix="build-") as tmp_name:
            tmp = Path(tmp_name)
            src = tmp / "src" / f"{main_class}.java"
            out = tmp / "classes"
            src.parent.mkdir()
            out.mkdir()
            src.write_text(source, encoding="utf-8")
            cmd = [
                javac,
                "--release",
                "11",
                "-nowarn",
                "-encoding",
                "UTF-8",
                "-cp",
                os.pathsep.join(str(p) for p in classpath),
                "-d",
                str(out),
                str(src),
            ]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
            except subprocess.TimeoutExpired as exc:
                raise PeerSetupError(f"javac did not finish within {timeout_s} s") from exc
            if done.returncode != 0:
                raise PeerSetupError(f"javac failed on {main_class}:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
            (out / ".complete").write_text(main_class + "\n", encoding="utf-8")
            shutil.rmtree(target, ignore_errors=True)
            out.replace(target)
    return JavaProgram(java, target, main_class)


SOURCES = Path(__file__).resolve().parent / "java"
"""Java sources of the test programs, one public class per file."""


def sbe_encoder(java: AeronJava, cache_dir: Path | None = None) -> JavaProgram:
    """``SbeEncode``: encodes messages with the jar's generated SBE encoders (see the source for its input)."""
    source = (SOURCES / "SbeEncode.java").read_text(encoding="utf-8")
    return compile_java(java, source, "SbeEncode", cache_dir=cache_dir)
