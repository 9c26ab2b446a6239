"""Aeron 1.15.1 log buffers: layout, appenders and the offer, reader, scanners, unblocker and the mapped file."""

from __future__ import annotations

from driver.logbuffer.appender import (
    EXCLUSIVE_FAILED,
    FAILED,
    ExclusiveLogAppender,
    ExclusiveTermAppender,
    LogAppender,
    ReservedValueSupplier,
    TermAppender,
)
from driver.logbuffer.fragment_assembler import BufferBuilder, FragmentAssembler
from driver.logbuffer.frame import HeaderWriter, create_default_header
from driver.logbuffer.header import BufferClaim, Header
from driver.logbuffer.log_buffers import LogBuffers
from driver.logbuffer.offer_result import OfferResult
from driver.logbuffer.reader import ControlledAction, TermReader
from driver.logbuffer.scanner import TermScanner
from driver.logbuffer.unblocker import LogBufferUnblocker, Status, TermUnblocker

__all__ = [
    "EXCLUSIVE_FAILED",
    "FAILED",
    "BufferBuilder",
    "BufferClaim",
    "ControlledAction",
    "ExclusiveLogAppender",
    "ExclusiveTermAppender",
    "FragmentAssembler",
    "Header",
    "HeaderWriter",
    "LogAppender",
    "LogBufferUnblocker",
    "LogBuffers",
    "OfferResult",
    "ReservedValueSupplier",
    "Status",
    "TermAppender",
    "TermReader",
    "TermScanner",
    "TermUnblocker",
    "create_default_header",
]
