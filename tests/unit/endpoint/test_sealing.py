"""Sealed connection messages: round trips, replays, forgeries, reordering within the window, rekeying."""

from __future__ import annotations

import os

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given
from hypothesis import strategies as st

from endpoint.connection.sealing import OVERHEAD, REKEY_INTERVAL, REPLAY_WINDOW, Opener, Sealer, SealError, _aad

KEY = bytes(range(32))


def pair(
    key: bytes = KEY, *, connection_id: int = 7, session_id: int = 11, direction: int = 1
) -> tuple[Sealer, Opener]:
    ids = {"connection_id": connection_id, "session_id": session_id, "direction": direction}
    return Sealer(key, **ids), Opener(key, **ids)


def test_a_sealed_message_opens_to_its_plaintext_and_hides_it() -> None:
    sealer, opener = pair()
    sealed = sealer.seal(b"move to 3,4")
    assert len(sealed) == len(b"move to 3,4") + OVERHEAD
    assert b"move to 3,4" not in sealed
    assert opener.open(sealed) == b"move to 3,4"
    assert opener.open(sealer.seal(b"")) == b""


def test_the_same_plaintext_seals_differently_each_time() -> None:
    sealer, _ = pair()
    assert sealer.seal(b"x") != sealer.seal(b"x")


def test_a_replayed_message_is_refused_and_later_ones_still_open() -> None:
    sealer, opener = pair()
    first = sealer.seal(b"one")
    opener.open(first)
    with pytest.raises(SealError, match="already received"):
        opener.open(first)
    assert opener.open(sealer.seal(b"two")) == b"two"


def test_messages_reordered_within_the_window_open_once_each() -> None:
    sealer, opener = pair()
    sealed = [sealer.seal(str(i).encode()) for i in range(10)]
    order = [3, 0, 2, 1, 9, 4, 8, 5, 7, 6]
    assert [opener.open(sealed[i]) for i in order] == [str(i).encode() for i in order]
    for i in order:
        with pytest.raises(SealError):
            opener.open(sealed[i])


def test_a_message_older_than_the_window_is_refused() -> None:
    sealer, opener = pair()
    old = sealer.seal(b"old")
    for _ in range(REPLAY_WINDOW):
        opener.open(sealer.seal(b"new"))
    with pytest.raises(SealError, match="replay window"):
        opener.open(old)


@pytest.mark.parametrize("where", [0, 8, 12, -1])
def test_a_flipped_bit_anywhere_is_refused(where: int) -> None:
    sealer, opener = pair()
    sealed = bytearray(sealer.seal(b"payload bytes"))
    sealed[where] ^= 0x01
    with pytest.raises(SealError):
        opener.open(sealed)


@pytest.mark.parametrize(
    "other",
    [
        {"connection_id": 8, "session_id": 11, "direction": 1},
        {"connection_id": 7, "session_id": 12, "direction": 1},
        {"connection_id": 7, "session_id": 11, "direction": 2},
    ],
)
def test_a_message_moved_to_another_connection_stream_or_direction_is_refused(other: dict[str, int]) -> None:
    sealer, _ = pair()
    with pytest.raises(SealError, match="authentication"):
        Opener(KEY, **other).open(sealer.seal(b"hello"))


def test_a_message_under_another_key_is_refused() -> None:
    sealer, _ = pair(os.urandom(32))
    _, opener = pair()
    with pytest.raises(SealError):
        opener.open(sealer.seal(b"hello"))


def test_keys_roll_over_at_the_rekey_interval_on_both_ends() -> None:
    sealer, opener = pair()
    sealer.counter = REKEY_INTERVAL - 2
    sealed = [sealer.seal(b"%d" % i) for i in range(4)]  # two under epoch 0, two under epoch 1
    assert [opener.open(m) for m in sealed] == [b"0", b"1", b"2", b"3"]


def test_a_message_of_a_new_epoch_sealed_under_the_old_key_is_refused() -> None:
    sealer, opener = pair()
    sealer.counter = REKEY_INTERVAL - 1
    opener.open(sealer.seal(b"last of epoch 0"))
    counter = REKEY_INTERVAL.to_bytes(8, "little")
    stale = AESGCM(KEY).encrypt(bytes([1, 0, 0, 0]) + counter, b"x", _aad(7, 11, 1))
    with pytest.raises(SealError, match="authentication"):
        opener.open(counter + stale)
    assert opener.open(sealer.seal(b"first of epoch 1")) == b"first of epoch 1"


def test_a_forged_message_from_a_future_epoch_derives_no_lasting_key() -> None:
    _, opener = pair()
    opener.open(Sealer(KEY, connection_id=7, session_id=11, direction=1).seal(b"first"))
    for epoch in (1, 2, 5):
        forged = (epoch * REKEY_INTERVAL).to_bytes(8, "little") + bytes(20)
        with pytest.raises(SealError):
            opener.open(forged)
    assert len(opener._keys) == 1


def test_a_key_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        Sealer(b"short", connection_id=1, session_id=1, direction=0)


@given(st.binary(max_size=200))
def test_open_refuses_any_bytes_with_a_seal_error_only(data: bytes) -> None:
    _, opener = pair()
    with pytest.raises(SealError):
        opener.open(data)
