"""``tune_gc``: the collector's youngest threshold raised (never lowered), and what is alive frozen on request."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import endpoint
from endpoint.gc_tuning import DEFAULT_YOUNG_THRESHOLD, tune_gc


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_the_youngest_threshold_is_raised_and_the_old_ones_returned() -> None:
    gc.set_threshold(700, 10, 10)
    assert endpoint.tune_gc is tune_gc
    assert tune_gc() == (700, 10, 10)
    assert gc.get_threshold() == (DEFAULT_YOUNG_THRESHOLD, 10, 10)
    assert tune_gc(50_000) == (DEFAULT_YOUNG_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (50_000, 10, 10)


def test_a_higher_threshold_the_application_chose_is_kept() -> None:
    gc.set_threshold(100_000, 20, 30)
    tune_gc()
    assert gc.get_threshold() == (100_000, 20, 30)
    with pytest.raises(ValueError, match="young_threshold"):
        tune_gc(0)


def test_freeze_moves_what_is_alive_out_of_collections() -> None:
    gc.unfreeze()
    held = [[i] for i in range(1000)]  # containers alive now
    tune_gc(freeze=True)
    frozen = gc.get_freeze_count()
    assert frozen >= len(held)
    young = [[i] for i in range(10)]  # made after: collected as usual, not frozen
    gc.collect()
    # What was alive is out of the collector's generations, what came after is in them. (The frozen count is no
    # measure: frozen objects that die, other threads' temporaries, leave it.)
    collected = {id(o) for o in gc.get_objects()}
    assert not any(id(o) in collected for o in held)
    assert all(id(o) in collected for o in young)
    assert gc.get_freeze_count() <= frozen
