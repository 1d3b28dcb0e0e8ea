"""JSON as the log stores it, and the hashes that name things (sources, tool intents).

SQLite's JSON functions (which the derived views use) reject the NaN and Infinity tokens that
Python's json module writes by default, and one such payload would break every view over the
events table. So non-finite floats are stored as the strings "NaN", "Infinity", "-Infinity",
and `restore_float` turns them back into floats where a field is known to be a float.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

NONFINITE: dict[str, float] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _finite_only(obj: Any) -> Any:
    """A copy of `obj` with non-finite floats replaced by their string names."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: _finite_only(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_only(v) for v in obj]
    return obj


def _dumps(obj: Any, **kw: Any) -> str:
    try:
        try:
            return json.dumps(obj, ensure_ascii=False, allow_nan=False, **kw)
        except ValueError:  # a non-finite float somewhere: the rare path
            return json.dumps(_finite_only(obj), ensure_ascii=False, allow_nan=False, **kw)
    except (TypeError, ValueError) as e:
        raise ValueError(f"payload is not JSON-serialisable: {e}") from None


def dumps_payload(payload: Any) -> str:
    """Compact JSON text for a payload (key order kept)."""
    return _dumps(payload, separators=(",", ":"))


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace: equal values give equal text, whatever their key order."""
    return _dumps(obj, sort_keys=True, separators=(",", ":"))


def intent_key(tool: str, args: dict[str, Any]) -> str:
    """A stable idempotency key for a tool call: sha256 hex of tool + canonical JSON of args."""
    return hashlib.sha256((tool + canonical_json(args)).encode("utf-8")).hexdigest()


def source_sha(text: str) -> str:
    """The content address of a kernel source: sha256 hex of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def restore_float(value: Any) -> Any:
    """Undo the storage of a non-finite float as a string; other values pass unchanged."""
    if isinstance(value, str) and value in NONFINITE:
        return NONFINITE[value]
    return value
