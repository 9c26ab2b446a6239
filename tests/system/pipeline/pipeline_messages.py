"""Message classes of the Spark tests, importable by Spark's Python workers (the session puts this dir on their path).

The ``serialization`` option names ``pipeline_messages:serialization``; each
worker calls it and so registers the same classes under the same ids.
"""

from __future__ import annotations

import attrs

from endpoint import Serialization


@attrs.define
class Move:
    seq: int
    x: float
    y: float


@attrs.define
class Chat:
    author: str
    text: str
    attachment: bytes


def serialization() -> Serialization:
    ser = Serialization()
    ser.register(Move, type_id=1)
    ser.register(Chat, type_id=2)
    return ser
