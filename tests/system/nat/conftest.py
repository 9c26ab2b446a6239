"""Fixtures of the NAT tests: a lab of three network namespaces (client behind a masquerading router, server),
removed at the end whatever happened."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.nat import NatLab, nat_lab_unavailable


@pytest.fixture
def nat_lab() -> Iterator[NatLab]:
    reason = nat_lab_unavailable()
    if reason is not None:
        pytest.skip(f"no NAT lab here: {reason}")
    with NatLab() as lab:
        yield lab
