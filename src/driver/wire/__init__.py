"""Aeron UDP frames (protocol version 0), byte-compatible with Aeron 1.15.1 and today's Aeron.

One module per frame, each with a layout diagram, a frozen attrs class for the
cold path (``encode() -> bytes``, ``decode(buf, offset=0, length=None)`` raising
:class:`driver.errors.MalformedFrameError`) and precompiled ``struct.Struct``
writers/unpackers for the sender and receiver hot paths. :mod:`driver.wire.datagram`
validates whole datagrams before they are dispatched.
"""

from __future__ import annotations

from driver.wire.data import (
    DATA_HEADER,
    DATA_HEADER_LENGTH,
    HEARTBEAT_EOS_FLAGS,
    HEARTBEAT_FLAGS,
    DataFrame,
    DataHeader,
    is_heartbeat,
    unpack_data_header,
    unpack_data_routing,
    write_data_header,
    write_heartbeat,
)
from driver.wire.datagram import classify, validate_data_datagram
from driver.wire.error import ERR_HEADER_LENGTH, ErrorFrame, write_error
from driver.wire.header import (
    CURRENT_VERSION,
    FRAME_HEADER_LENGTH,
    HDR_TYPE_DATA,
    HDR_TYPE_ERR,
    HDR_TYPE_EXT,
    HDR_TYPE_NAK,
    HDR_TYPE_PAD,
    HDR_TYPE_RES,
    HDR_TYPE_RSP_SETUP,
    HDR_TYPE_RTTM,
    HDR_TYPE_SETUP,
    HDR_TYPE_SM,
    FrameHeader,
    unpack_frame_header,
)
from driver.wire.nak import NAK_LENGTH, Nak, unpack_nak, write_nak
from driver.wire.rttm import REPLY_FLAG, RTTM_LENGTH, RttMeasurement, unpack_rttm, write_rttm
from driver.wire.setup import SETUP_LENGTH, SetupFrame, check_setup, unpack_setup, write_setup
from driver.wire.status import (
    END_OF_STREAM_FLAG,
    SEND_SETUP_FLAG,
    SM_LENGTH,
    SM_WITH_GROUP_TAG_LENGTH,
    StatusMessage,
    read_sm_group_tag,
    unpack_sm,
    write_sm,
    write_sm_with_group_tag,
)

__all__ = [
    "CURRENT_VERSION",
    "DATA_HEADER",
    "DATA_HEADER_LENGTH",
    "END_OF_STREAM_FLAG",
    "ERR_HEADER_LENGTH",
    "FRAME_HEADER_LENGTH",
    "HDR_TYPE_DATA",
    "HDR_TYPE_ERR",
    "HDR_TYPE_EXT",
    "HDR_TYPE_NAK",
    "HDR_TYPE_PAD",
    "HDR_TYPE_RES",
    "HDR_TYPE_RSP_SETUP",
    "HDR_TYPE_RTTM",
    "HDR_TYPE_SETUP",
    "HDR_TYPE_SM",
    "HEARTBEAT_EOS_FLAGS",
    "HEARTBEAT_FLAGS",
    "NAK_LENGTH",
    "REPLY_FLAG",
    "RTTM_LENGTH",
    "SEND_SETUP_FLAG",
    "SETUP_LENGTH",
    "SM_LENGTH",
    "SM_WITH_GROUP_TAG_LENGTH",
    "DataFrame",
    "DataHeader",
    "ErrorFrame",
    "FrameHeader",
    "Nak",
    "RttMeasurement",
    "SetupFrame",
    "StatusMessage",
    "check_setup",
    "classify",
    "is_heartbeat",
    "read_sm_group_tag",
    "unpack_data_header",
    "unpack_data_routing",
    "unpack_frame_header",
    "unpack_nak",
    "unpack_rttm",
    "unpack_setup",
    "unpack_sm",
    "validate_data_datagram",
    "write_data_header",
    "write_error",
    "write_heartbeat",
    "write_nak",
    "write_rttm",
    "write_setup",
    "write_sm",
    "write_sm_with_group_tag",
]
