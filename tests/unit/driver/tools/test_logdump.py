"""``log``: dumping log buffer files written by our appenders, and refusing files that are not logs."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.logbuffer.appender import TermAppender
from driver.logbuffer.descriptor import initialize_publication_metadata
from driver.logbuffer.frame import HeaderWriter, create_default_header
from driver.logbuffer.header import BufferClaim
from driver.logbuffer.log_buffers import LogBuffers
from driver.tools.cli import main
from driver.tools.logdump import LogFile, hexdump

TERM = 64 * 1024
INITIAL_TERM_ID = 100


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


@pytest.fixture
def log_path(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "publications" / "5.logbuffer"
    path.parent.mkdir()
    log = LogBuffers.create(path, TERM, 4096)
    claim = BufferClaim()
    try:
        initialize_publication_metadata(
            log.metadata,
            session_id=77,
            stream_id=1001,
            initial_term_id=INITIAL_TERM_ID,
            mtu_length=1408,
            term_length=TERM,
            page_size=4096,
            correlation_id=5,
        )
        header = HeaderWriter(create_default_header(77, 1001, INITIAL_TERM_ID))
        appender = TermAppender(log.terms[0], log.metadata, 0)
        appender.append_unfragmented(header, b"Hello World!", 0, 12, None, INITIAL_TERM_ID)
        appender.append_fragmented(header, bytes(3000), 0, 3000, 1408 - 32, None, INITIAL_TERM_ID)
        appender.claim(header, 100, claim, INITIAL_TERM_ID)  # claimed, never committed
        yield path
    finally:
        claim.buffer.release()
        log.close()


def test_dump_shows_metadata_tails_and_frames(log_path: Path) -> None:
    code, text = run("log", str(log_path))
    assert code == 0
    assert "term length:         65,536" in text
    assert "initial term id:     100" in text
    assert "correlation id:      5" in text
    assert "default header:      type=DATA version=0 flags=0xc0(BE) session=77 stream=1001" in text
    lines = text.splitlines()
    frames = [line for line in lines if line.strip().startswith("offset=")]
    assert len(frames) == 5
    assert "length=     44 type=DATA  flags=0xc0(BE)" in frames[0]
    assert "flags=0x80(B)" in frames[1]
    assert "flags=0x00 " in frames[2]
    assert "flags=0x40(E)" in frames[3]
    assert "length=   -132" in frames[4]
    assert frames[4].endswith("(claimed, not committed)")
    assert "session=77 stream=1001 term_id=100" in frames[0]
    assert "  [0] raw=0x00000064" in text
    assert "<- active" in text


def test_hexdump_of_payloads(log_path: Path) -> None:
    code, text = run("log", str(log_path), "--frames", "1", "--hexdump")
    assert code == 0
    assert "      0000: 48 65 6c 6c 6f 20 57 6f 72 6c 64 21" in text
    assert "|Hello World!|" in text
    assert "stopped after 1 frames" in text


def test_json_and_partition_choice(log_path: Path) -> None:
    code, text = run("log", str(log_path), "--json", "--partition", "0")
    assert code == 0
    doc = json.loads(text)
    assert doc["initial_term_id"] == INITIAL_TERM_ID
    assert [t["partition"] for t in doc["terms"]] == [0]
    frames = doc["terms"][0]["frames"]
    assert frames[0]["payload_length"] == 12
    assert frames[-1]["committed"] is False


def test_listing_a_directory(log_path: Path) -> None:
    code, text = run("log", str(log_path.parent.parent))
    assert code == 0
    assert "publications/5.logbuffer" in text
    assert run("log", "-d", str(log_path.parent.parent))[1] == text


def test_not_a_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "small.logbuffer").write_bytes(b"x" * 100)
    (tmp_path / "zeros.logbuffer").write_bytes(bytes(8192))
    for name, needle in (("small.logbuffer", "too short"), ("zeros.logbuffer", "not a log buffer"), ("no", "no such")):
        assert run("log", str(tmp_path / name))[0] == 1
        err = capsys.readouterr().err
        assert needle in err
        assert len(err.strip().splitlines()) == 1


def test_truncated_log(log_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = log_path.read_bytes()
    cut = tmp_path / "cut.logbuffer"
    cut.write_bytes(data[: TERM * 2] + data[-4096:])
    assert run("log", str(cut))[0] == 1
    assert "truncated" in capsys.readouterr().err


def test_log_file_is_read_only(log_path: Path) -> None:
    before = log_path.read_bytes()
    with LogFile(log_path) as log:
        assert log.metadata().tails[0].term_offset > 0
    assert log_path.read_bytes() == before


def test_hexdump_layout() -> None:
    assert hexdump(b"AB\x00", indent="") == "0000: 41 42 00" + " " * 39 + "  |AB.|"
