"""A bounded replay's limit (sans-IO): the counter's value while it is the same counter, frozen once it is gone;
and the archive id the directory keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.archive.errors import ArchiveError, ReplayLimitError
from driver.archive.mark import ARCHIVE_ID_FILE, archive_id_of
from driver.archive.replay_bound import RECORD_ALLOCATED, CounterBound, check_limit_counter

RECLAIMED = -1


def test_the_bound_follows_the_counter_while_it_is_the_same_counter() -> None:
    bound = CounterBound(4, registration_id=77, value=0)
    assert bound.observe(RECORD_ALLOCATED, 77, 0) == 0
    assert bound.observe(RECORD_ALLOCATED, 77, 4096) == 4096
    assert bound.observe(RECORD_ALLOCATED, 77, 4096) == 4096  # standing still: the replay waits
    assert not bound.frozen


def test_a_freed_counter_freezes_the_bound_at_its_last_value() -> None:
    bound = CounterBound(4, registration_id=77, value=1024)
    assert bound.observe(RECORD_ALLOCATED, 77, 2048) == 2048
    assert bound.observe(RECLAIMED, 77, 0) == 2048
    assert bound.frozen
    assert bound.observe(RECORD_ALLOCATED, 77, 1 << 20) == 2048  # back in use: no longer ours


def test_a_reused_counter_slot_freezes_the_bound() -> None:
    bound = CounterBound(4, registration_id=77, value=1024)
    assert bound.observe(RECORD_ALLOCATED, 78, 1 << 20) == 1024
    assert bound.frozen


@pytest.mark.parametrize(
    ("counter_id", "state", "match"),
    [
        (-1, None, "no such counter"),
        (100, None, "no such counter"),
        (5, 0, "not allocated"),
        (5, RECLAIMED, "not allocated"),
    ],
)
def test_a_limit_counter_must_be_allocated(counter_id: int, state: int | None, match: str) -> None:
    with pytest.raises(ReplayLimitError, match=match):
        check_limit_counter(counter_id, 100, state)
    check_limit_counter(5, 100, RECORD_ALLOCATED)


def test_the_archive_id_is_made_once_and_kept(tmp_path: Path) -> None:
    first = archive_id_of(tmp_path)
    assert 0 <= first < 1 << 63
    assert archive_id_of(tmp_path) == first
    assert (tmp_path / ARCHIVE_ID_FILE).read_text().strip() == str(first)
    assert archive_id_of(tmp_path, configured=42) == 42  # a configured id wins; the kept one stays
    assert archive_id_of(tmp_path) == first
    assert [p.name for p in tmp_path.iterdir()] == [ARCHIVE_ID_FILE]  # no temporary left behind


def test_a_damaged_archive_id_is_an_error_not_a_new_id(tmp_path: Path) -> None:
    (tmp_path / ARCHIVE_ID_FILE).write_text("not a number\n")
    with pytest.raises(ArchiveError, match="not an archive id"):
        archive_id_of(tmp_path)
