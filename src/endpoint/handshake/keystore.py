"""On-disk identity of an end point and the server keys a client trusts.

An end point keeps one X25519 key pair for life, so clients can pin the server's
public key on first contact (trust on first use) and notice when it changes.
Files are written atomically with mode 0o600: a crash never leaves half a key,
and the private key is readable by its owner only. Anything unreadable or
corrupt raises :class:`ConfigurationError` rather than being silently replaced,
since replacing a key or forgetting pins would defeat the pinning.

Both live by default in the user's configuration directory (see
:func:`default_config_dir`), so a restarted server keeps its identity and a
client keeps its pins. Processes sharing the pin file change it under a file
lock, re-reading it first, so none loses another's pins.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from endpoint.errors import ConfigurationError

__all__ = ["CONFIG_DIR_ENV", "KnownServers", "default_config_dir", "load_or_create_private_key"]

_log = logging.getLogger("endpoint")

_KEY_LENGTH = 32
CONFIG_DIR_ENV = "ENDPOINT_CONFIG_DIR"
"""Overrides the directory of the default key and pin files (tests point it at a temp dir)."""


def default_config_dir() -> Path:
    """``$ENDPOINT_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/endpoint``, else ``~/.config/endpoint``."""
    override = os.environ.get(CONFIG_DIR_ENV)
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return base / "endpoint"


def _write_temp(directory: Path, name: str, data: bytes) -> Path:
    """A durable 0o600 temp file next to the target, ready to be linked or renamed over it."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        os.unlink(temp)
        raise
    return Path(temp)


def _read_private_key(path: Path) -> X25519PrivateKey:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"private key file {path} is unreadable: {exc.strerror or exc}") from exc
    if len(raw) != _KEY_LENGTH:
        raise ConfigurationError(f"private key file {path} holds {len(raw)} bytes, expected {_KEY_LENGTH} raw bytes")
    return X25519PrivateKey.from_private_bytes(raw)


def load_or_create_private_key(path: Path | None) -> X25519PrivateKey:
    """The key stored at ``path`` (32 raw bytes), created there on first use; None gives a fresh in-memory key."""
    if path is None:
        return X25519PrivateKey.generate()
    path = Path(path)
    if path.exists() or path.is_symlink():
        return _read_private_key(path)
    key = X25519PrivateKey.generate()
    try:
        temp = _write_temp(path.parent, path.name, key.private_bytes_raw())
        try:
            # link() refuses to overwrite: if another process created the key meanwhile, we use theirs.
            os.link(temp, path)
        except FileExistsError:
            return _read_private_key(path)
        except OSError:  # file system without hard links
            os.replace(temp, path)
        finally:
            temp.unlink(missing_ok=True)
    except OSError as exc:
        raise ConfigurationError(f"cannot create private key file {path}: {exc.strerror or exc}") from exc
    return key


_PARSED_FILES_MAX = 8
_parsed: dict[Path, tuple[tuple[int, int, int], dict[str, bytes]]] = {}
"""The pin files this process read last, by path: (stamp, pins). A host's clients each keep a
:class:`KnownServers` of the same file; a connect storm of hundreds read and parsed it once each (a grown file
took milliseconds every time). Bounded by :data:`_PARSED_FILES_MAX` paths (from configuration, not the network)."""


def _remember_parsed(path: Path, stamp: tuple[int, int, int] | None, keys: dict[str, bytes]) -> None:
    if stamp is None:
        _parsed.pop(path, None)
        return
    if path not in _parsed and len(_parsed) >= _PARSED_FILES_MAX:
        del _parsed[next(iter(_parsed))]
    _parsed[path] = (stamp, dict(keys))


class KnownServers:
    """Trust on first use: the public key each server address ("host:port") presented the first time."""

    def __init__(self, path: Path | None) -> None:
        """None keeps the pins in memory only; else they live in a JSON file ``{address: hex key}``, shared with
        other processes (read again when it changed; changed under a lock)."""
        self.path = Path(path) if path is not None else None
        self._keys: dict[str, bytes] = {}
        self._stamp: tuple[int, int, int] | None = None
        self._refresh()

    def _file_stamp(self) -> tuple[int, int, int] | None:
        assert self.path is not None
        try:
            st = self.path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise ConfigurationError(f"known servers file {self.path} is unreadable: {exc}") from exc
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _refresh(self) -> None:
        """Take in what other processes wrote since we last looked."""
        if self.path is None:
            return
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return
        parsed = _parsed.get(self.path)
        if stamp is not None and parsed is not None and parsed[0] == stamp:
            self._keys = dict(parsed[1])  # ours to change (remember, forget)
        else:
            self._keys = self._load(self.path) if stamp is not None or self.path.is_symlink() else {}
            _remember_parsed(self.path, stamp, self._keys)
        self._stamp = stamp

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive lock on ``<file>.lock`` (a file of its own: the pin file is replaced on every write)."""
        assert self.path is not None
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ConfigurationError(f"cannot lock known servers file {self.path}: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    @staticmethod
    def _load(path: Path) -> dict[str, bytes]:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"known servers file {path} is unreadable: {exc}") from exc
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"known servers file {path} is not valid JSON: {exc}") from exc
        if type(document) is not dict:
            raise ConfigurationError(f"known servers file {path} must hold a JSON object of address -> hex key")
        keys: dict[str, bytes] = {}
        for address, hex_key in document.items():
            try:
                key = bytes.fromhex(hex_key) if type(hex_key) is str else b""
            except ValueError:
                key = b""
            if len(key) != _KEY_LENGTH:
                raise ConfigurationError(
                    f"known servers file {path}: entry {address!r} is not a {_KEY_LENGTH}-byte hex key"
                )
            keys[address] = key
        return keys

    def check(self, address: str, public_key: bytes) -> Literal["new", "match", "changed"]:
        known = self.get(address)
        if known is None:
            return "new"
        return "match" if known == bytes(public_key) else "changed"

    def get(self, address: str) -> bytes | None:
        self._refresh()
        return self._keys.get(address)

    def remember(self, address: str, public_key: bytes) -> None:
        """Pin (or re-pin, logged at WARNING) ``address`` to ``public_key`` and persist, keeping other pins."""
        key = bytes(public_key)
        if len(key) != _KEY_LENGTH:
            raise ValueError(f"a server public key is {_KEY_LENGTH} bytes, got {len(key)}")
        self._refresh()
        if self._keys.get(address) == key:
            return  # pinned already (by another client of this host in the same storm): nothing to lock or write
        with self._locked() if self.path is not None else contextlib.nullcontext():
            self._refresh()
            previous = self._keys.get(address)
            if previous == key:
                return
            if previous is not None:
                _log.warning(
                    "re-pinning %s: its key changes from %s to %s%s",
                    address,
                    previous.hex(),
                    key.hex(),
                    f" in {self.path}" if self.path is not None else "",
                )
            self._keys[address] = key
            self._save()

    def forget(self, address: str) -> None:
        """Drop the pin for ``address`` (the next key it shows is trusted again); unknown addresses are ignored."""
        with self._locked() if self.path is not None else contextlib.nullcontext():
            self._refresh()
            if self._keys.pop(address, None) is not None:
                _log.warning("forgot the pinned key of %s", address)
                self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        document = {address: key.hex() for address, key in sorted(self._keys.items())}
        data = (json.dumps(document, indent=1) + "\n").encode()
        try:
            temp = _write_temp(self.path.parent, self.path.name, data)
            try:
                os.replace(temp, self.path)
            finally:
                temp.unlink(missing_ok=True)
        except OSError as exc:
            raise ConfigurationError(f"cannot write known servers file {self.path}: {exc.strerror or exc}") from exc
        self._stamp = self._file_stamp()
        _remember_parsed(self.path, self._stamp, self._keys)
