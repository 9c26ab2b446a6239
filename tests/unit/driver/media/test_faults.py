from __future__ import annotations

from driver.media.faults import FaultInjector, FaultSpec


def _run(spec: FaultSpec, count: int = 2000) -> tuple[list[bytes], FaultInjector]:
    injector = FaultInjector(spec)
    out: list[bytes] = []
    for i in range(count):
        out.extend(injector.process(i.to_bytes(4, "little")))
    for _ in range(16):
        out.extend(injector.release_held())
    return out, injector


def test_no_faults_passes_everything_in_order() -> None:
    out, injector = _run(FaultSpec())
    assert out == [i.to_bytes(4, "little") for i in range(2000)]
    assert (injector.dropped, injector.reordered, injector.duplicated) == (0, 0, 0)


def test_loss_rate_and_seed_are_repeatable() -> None:
    first, injector = _run(FaultSpec(loss_rate=0.1, seed=7))
    second, _ = _run(FaultSpec(loss_rate=0.1, seed=7))
    assert first == second
    assert 120 < injector.dropped < 280
    assert len(first) == 2000 - injector.dropped


def test_reorder_and_duplicate_keep_every_datagram() -> None:
    out, injector = _run(FaultSpec(reorder_rate=0.2, duplicate_rate=0.05, seed=3))
    values = [int.from_bytes(d, "little") for d in out]
    assert set(values) == set(range(2000))
    assert len(values) == 2000 + injector.duplicated
    assert values != sorted(values)
    assert injector.reordered > 0
    assert injector.duplicated > 0
