"""Private key file and trust-on-first-use server pins: create, load, persist, corrupt files, permissions."""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from endpoint.errors import ConfigurationError
from endpoint.handshake.keystore import CONFIG_DIR_ENV, KnownServers, default_config_dir, load_or_create_private_key


def raw(key: X25519PrivateKey) -> bytes:
    return key.private_bytes_raw()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# ---------------------------------------------------------------------------------------------------- private key


def test_no_path_gives_fresh_keys() -> None:
    assert raw(load_or_create_private_key(None)) != raw(load_or_create_private_key(None))


def test_key_is_created_with_parents_and_mode_600_then_loaded(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "server.key"
    created = load_or_create_private_key(path)
    assert path.read_bytes() == raw(created)
    assert mode(path) == 0o600
    assert leftovers(path.parent) == []
    assert raw(load_or_create_private_key(path)) == raw(created)


def test_key_is_created_0600_even_with_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = tmp_path / "k"
        load_or_create_private_key(path)
    finally:
        os.umask(old)
    assert mode(path) == 0o600


def test_existing_key_is_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "k"
    key = X25519PrivateKey.generate()
    path.write_bytes(raw(key))
    assert raw(load_or_create_private_key(path)) == raw(key)
    assert path.read_bytes() == raw(key)


@pytest.mark.parametrize("content", [b"", b"\x01" * 31, b"\x01" * 33, b"\x01" * 64])
def test_wrong_size_key_file_names_the_path(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "k"
    path.write_bytes(content)
    with pytest.raises(ConfigurationError, match=re.escape(str(path))):
        load_or_create_private_key(path)
    assert path.read_bytes() == content  # left alone for the operator


def test_unreadable_key_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.mkdir()  # a directory where the key should be
    with pytest.raises(ConfigurationError, match=re.escape(str(path))):
        load_or_create_private_key(path)


def test_uncreatable_key_file_names_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    path = blocker / "k"  # parent is a regular file
    with pytest.raises(ConfigurationError, match=re.escape(str(path))):
        load_or_create_private_key(path)


# ---------------------------------------------------------------------------------------------------- known servers

A = bytes(range(32))
B = bytes(range(1, 33))


def test_in_memory_pins() -> None:
    known = KnownServers(None)
    assert known.check("h:1", A) == "new"
    assert known.get("h:1") is None
    known.remember("h:1", A)
    assert known.check("h:1", A) == "match"
    assert known.check("h:1", B) == "changed"
    assert known.check("h:2", B) == "new"
    known.forget("h:1")
    assert known.check("h:1", B) == "new"
    known.forget("never")


def test_pins_persist_atomically_with_mode_600(tmp_path: Path) -> None:
    path = tmp_path / "dir" / "known.json"
    known = KnownServers(path)
    assert not path.exists()  # nothing written until something is remembered
    known.remember("10.0.0.1:6000", A)
    known.remember("[::1]:6000", B)
    assert mode(path) == 0o600
    assert json.loads(path.read_text()) == {"10.0.0.1:6000": A.hex(), "[::1]:6000": B.hex()}
    assert leftovers(path.parent) == []

    reloaded = KnownServers(path)
    assert reloaded.get("10.0.0.1:6000") == A
    assert reloaded.check("[::1]:6000", B) == "match"
    reloaded.forget("10.0.0.1:6000")
    assert KnownServers(path).get("10.0.0.1:6000") is None
    assert KnownServers(path).get("[::1]:6000") == B


def test_re_pinning_a_changed_key_persists(tmp_path: Path) -> None:
    path = tmp_path / "known.json"
    KnownServers(path).remember("h:1", A)
    known = KnownServers(path)
    assert known.check("h:1", B) == "changed"
    known.remember("h:1", B)
    assert KnownServers(path).check("h:1", B) == "match"


def test_remember_rejects_wrong_key_length() -> None:
    with pytest.raises(ValueError, match="32"):
        KnownServers(None).remember("h:1", b"\x00" * 31)


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{not json",
        "[]",
        '{"h:1": 5}',
        '{"h:1": "zz"}',
        '{"h:1": "' + "00" * 31 + '"}',
        '{"h:1": null}',
    ],
)
def test_corrupt_file_names_the_path_and_is_not_overwritten(tmp_path: Path, content: str) -> None:
    path = tmp_path / "known.json"
    path.write_text(content)
    with pytest.raises(ConfigurationError, match=re.escape(str(path))):
        KnownServers(path)
    assert path.read_text() == content


def test_non_utf8_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "known.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ConfigurationError, match=re.escape(str(path))):
        KnownServers(path)


def test_unwritable_location_names_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    known = KnownServers(blocker / "known.json")
    with pytest.raises(ConfigurationError, match=re.escape(str(blocker / "known.json"))):
        known.remember("h:1", A)


# ---------------------------------------------------------------------------------------------------- sharing


def test_default_directory_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path / "cfg"))
    assert default_config_dir() == tmp_path / "cfg"
    monkeypatch.delenv(CONFIG_DIR_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert default_config_dir() == tmp_path / "xdg" / "endpoint"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_config_dir() == tmp_path / "home" / ".config" / "endpoint"


def test_the_tests_never_use_the_real_home() -> None:
    assert os.environ[CONFIG_DIR_ENV]
    assert not default_config_dir().is_relative_to(Path.home() / ".config")


def test_two_stores_on_one_file_keep_each_others_pins(tmp_path: Path) -> None:
    path = tmp_path / "known.json"
    one, two = KnownServers(path), KnownServers(path)
    one.remember("a:1", b"\x01" * 32)
    two.remember("b:2", b"\x02" * 32)  # two never read a:1 before: it must not drop it
    one.remember("c:3", b"\x03" * 32)
    assert json.loads(path.read_text()) == {"a:1": "01" * 32, "b:2": "02" * 32, "c:3": "03" * 32}
    assert two.get("c:3") == b"\x03" * 32, "a store sees what another process wrote"
    two.forget("a:1")
    assert one.get("a:1") is None


def _pin_many(path: str, prefix: str, count: int) -> None:
    store = KnownServers(Path(path))
    for index in range(count):
        store.remember(f"{prefix}:{index}", bytes([index % 256]) * 32)


def test_processes_pinning_at_once_lose_nothing(tmp_path: Path) -> None:
    import multiprocessing

    path = tmp_path / "known.json"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_pin_many, args=(str(path), f"p{n}", 40)) for n in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert len(json.loads(path.read_text())) == 120


def test_a_re_pin_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = KnownServers(tmp_path / "known.json")
    store.remember("a:1", b"\x01" * 32)
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="endpoint"):
        store.remember("a:1", b"\x02" * 32)
    assert any("re-pinning a:1" in record.getMessage() for record in caplog.records)


def test_stores_of_one_file_parse_it_once_until_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "known.json"
    path.write_text(json.dumps({f"h:{n}": f"{n:02x}" * 32 for n in range(50)}))
    loads: list[Path] = []
    real_load = KnownServers._load

    def counting_load(file: Path) -> dict[str, bytes]:
        loads.append(file)
        return real_load(file)

    monkeypatch.setattr(KnownServers, "_load", staticmethod(counting_load))
    stores = [KnownServers(path) for _ in range(20)]  # a host's clients in one process, as in a connect storm
    assert all(store.get("h:7") == b"\x07" * 32 for store in stores)
    assert len(loads) == 1
    stores[0].remember("new:1", b"\x01" * 32)  # the writer's own result is kept: nobody parses it again
    assert all(store.get("new:1") == b"\x01" * 32 for store in stores)
    assert len(loads) == 1
    stores[1].forget("h:7")  # saved: the others see it, from the writer's copy
    assert stores[2].get("h:7") is None
    assert stores[0].get("new:1") == b"\x01" * 32
    assert len(loads) == 1
    other = json.loads(path.read_text())
    other["outside:1"] = "aa" * 32
    path.write_text(json.dumps(other))  # another process's write: seen once, parsed once
    assert all(store.get("outside:1") == b"\xaa" * 32 for store in stores)
    assert len(loads) == 2


def test_a_pin_another_store_already_wrote_takes_no_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host's clients each hold a store of one file; in a storm every one of them pins the new server's key. Those
    that find it pinned already (by another) neither lock nor write; a different key still locks and re-pins."""
    path = tmp_path / "known.json"
    first, second = KnownServers(path), KnownServers(path)
    first.remember("s:1", A)
    written = path.stat()
    locks: list[str] = []
    real_locked = KnownServers._locked

    def counted(self: KnownServers) -> object:
        locks.append("lock")
        return real_locked(self)

    monkeypatch.setattr(KnownServers, "_locked", counted)
    second.remember("s:1", A)
    assert locks == []
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    second.remember("s:1", B)
    assert locks == ["lock"]
    assert first.get("s:1") == B
