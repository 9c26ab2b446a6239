"""The ``message_type``/``message`` columns: payloads decoded with an end point's Serialization, as JSON.

The ``serialization`` option names ``module:attr``: either an
:class:`endpoint.Serialization` or a callable returning one (so the classes
register in the executor as they do in the application). Decoding is one
msgpack call per row, so these columns cost far more than the raw ones; a
payload that does not decode (a foreign message, a torn one) gets nulls.
"""

from __future__ import annotations

import base64
import datetime
import functools
import importlib
import json
import math
from typing import Any, Final

import attrs
import pyarrow as pa  # type: ignore[import-untyped]

from endpoint.errors import SerializationError
from endpoint.pipeline.options import PipelineOptionError
from endpoint.serialization import Serialization

__all__ = ["MESSAGE_FIELDS", "decode_payloads", "load_serialization", "to_json"]

MESSAGE_FIELDS: Final = (pa.field("message_type", pa.string()), pa.field("message", pa.string()))


@functools.lru_cache(maxsize=16)
def load_serialization(spec: str) -> Serialization:
    """Import ``module:attr``; call it when it is not a Serialization already. Cached per process."""
    module_name, _, attr_path = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name.strip())
    except ImportError as exc:
        raise PipelineOptionError(
            f"option serialization={spec!r}: cannot import {module_name.strip()!r} ({exc}); the module must be "
            "importable by Spark's Python workers (installed, or on PYTHONPATH when the session starts)"
        ) from exc
    for name in attr_path.strip().split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise PipelineOptionError(
                f"option serialization={spec!r}: {module_name.strip()!r} has no attribute {attr_path.strip()!r}"
            ) from None
    if isinstance(target, Serialization):
        return target
    if not callable(target):
        raise PipelineOptionError(
            f"option serialization={spec!r}: names a {type(target).__name__}, not an endpoint.Serialization "
            "(or a callable returning one)"
        )
    try:
        made = target()
    except Exception as exc:
        raise PipelineOptionError(
            f"option serialization={spec!r}: calling it raised {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(made, Serialization):
        raise PipelineOptionError(
            f"option serialization={spec!r}: calling it gave a {type(made).__name__}, not an endpoint.Serialization"
        )
    return made


def _jsonable(value: object) -> object:
    """``json.dumps`` fallback: attrs instances as their fields, bytes as base64, the rest as text."""
    kind: Any = type(value)
    if attrs.has(kind):
        return {field.name: getattr(value, field.name) for field in attrs.fields(kind)}
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)


def _finite(value: object) -> object:
    """NaN and the infinities are not JSON: they become strings (``json.dumps`` would write bare NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def to_json(value: object) -> str:
    """JSON of a decoded message: attrs instances become objects of their fields, recursively."""
    try:
        return json.dumps(value, default=_jsonable, allow_nan=False, separators=(",", ":"))
    except (ValueError, TypeError):
        # Non-finite floats, or keys JSON cannot have: normalise the tree, then write what can be written.
        plain = json.loads(json.dumps(value, default=_jsonable, allow_nan=True, skipkeys=True))
        return json.dumps(_finite(plain), separators=(",", ":"))


def _type_name(value: object) -> str:
    kind = type(value)
    return kind.__qualname__ if attrs.has(kind) else kind.__name__


def decode_payloads(payloads: pa.Array, serialization: Serialization) -> tuple[pa.Array, pa.Array]:
    """(``message_type``, ``message``) for each payload of a binary array; nulls where it does not decode."""
    types: list[str | None] = []
    messages: list[str | None] = []
    offsets = payloads.buffers()[1]
    data = payloads.buffers()[2]
    count = len(payloads)
    if count:
        import numpy as np

        bounds = np.frombuffer(offsets, dtype=np.int32, count=count + 1, offset=payloads.offset * 4).tolist()
        view = memoryview(data) if data is not None else memoryview(b"")
        decode = serialization.decode
        for row in range(count):
            start, stop = bounds[row], bounds[row + 1]
            if start == stop:
                types.append(None)
                messages.append(None)
                continue
            try:
                value = decode(view[start:stop])
                text = to_json(value)
            except (SerializationError, RecursionError, ValueError, TypeError):
                types.append(None)
                messages.append(None)
                continue
            types.append(_type_name(value))
            messages.append(text)
    return pa.array(types, pa.string()), pa.array(messages, pa.string())
