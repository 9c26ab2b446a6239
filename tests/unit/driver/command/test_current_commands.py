"""Codecs of today's commands and responses, and the per-generation error codes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.command.current import (
    DestinationByIdMessage,
    NextSessionIdMessage,
    NextSessionIdResponse,
    PublicationErrorResponse,
    RejectImageMessage,
    StaticCounterMessage,
    StaticCounterResponse,
    TerminateDriverMessage,
    decode_current_command,
)
from driver.command.types import CurrentCommandType
from driver.errors import CurrentErrorCode, ErrorCode, MalformedCommandError, RegistrationError, wire_error_code

i64 = st.integers(-(2**63), 2**63 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60)


@given(i64, i64, i64, i32, st.binary(max_size=112), text)
def test_static_counter_round_trip(client: int, cid: int, reg: int, type_id: int, key: bytes, label: str) -> None:
    message = StaticCounterMessage(client, cid, reg, type_id, key, label)
    body = message.encode()
    assert len(body) == message.encoded_length()
    assert decode_current_command(CurrentCommandType.ADD_STATIC_COUNTER, body) == (
        CurrentCommandType.ADD_STATIC_COUNTER,
        message,
    )


def test_layouts_match_today_s_c_structs() -> None:
    body = StaticCounterMessage(1, 2, 3, 4, b"ab", "L").encode()
    assert int.from_bytes(body[16:24], "little") == 3
    assert int.from_bytes(body[24:28], "little") == 4
    assert int.from_bytes(body[28:32], "little") == 2  # key length, key at 32 padded to 4
    assert body[32:34] == b"ab"
    assert int.from_bytes(body[36:40], "little") == 1
    reject = RejectImageMessage(1, 2, 3, 4, "why").encode()
    assert int.from_bytes(reject[32:36], "little") == 3
    assert reject[36:] == b"why"
    assert len(DestinationByIdMessage(1, 2, 3, 4).encode()) == 32
    assert len(NextSessionIdMessage(1, 2, 3).encode()) == 20
    assert TerminateDriverMessage(1, 2, b"tok").encode()[16:] == b"\x03\x00\x00\x00tok"
    assert NextSessionIdResponse.decode(NextSessionIdResponse(5, -7).encode()) == NextSessionIdResponse(5, -7)
    assert StaticCounterResponse(5, 9).encode() == NextSessionIdResponse(5, 9).encode()


def test_publication_error_layout() -> None:
    error = PublicationErrorResponse(1, 2, 3, 4, 5, 6, 1, 40123, bytes([127, 0, 0, 1]), 13, "rejected")
    body = error.encode()
    assert int.from_bytes(body[60:64], "little") == 13
    assert int.from_bytes(body[64:68], "little") == len("rejected")
    assert body[68:] == b"rejected"
    decoded = PublicationErrorResponse.decode(body)
    assert decoded.error_message == "rejected"
    assert decoded.source == "127.0.0.1:40123"


def test_truncated_command_is_malformed() -> None:
    with pytest.raises(MalformedCommandError):
        decode_current_command(CurrentCommandType.REMOVE_DESTINATION_BY_ID, b"\x00" * 20)
    assert decode_current_command(0x01, b"\x00" * 40) is None


def test_error_codes_by_generation() -> None:
    assert wire_error_code(ErrorCode.GENERIC_ERROR, current=True) == 11
    assert wire_error_code(ErrorCode.GENERIC_ERROR, current=False) == 0
    assert wire_error_code(ErrorCode.INVALID_CHANNEL, current=True) == 1
    assert wire_error_code(CurrentErrorCode.NOT_SUPPORTED, current=True) == 8
    assert wire_error_code(CurrentErrorCode.NOT_SUPPORTED, current=False) == 0
    assert wire_error_code(CurrentErrorCode.UNKNOWN_COUNTER, current=False) == 5
    assert "GENERIC_ERROR" in str(RegistrationError(1, 11, "x", current=True))
    assert "GENERIC_ERROR" in str(RegistrationError(1, 0, "x"))
    assert "UNUSED" in str(RegistrationError(1, 0, "x", current=True))
