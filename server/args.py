"""The scalar argument types of the MCP tools: strict, and bounded where a value reaches SQLite.

A tool's input schema is what a client is told; these make the server hold it to that. A string
"5" or a boolean where the schema says integer (or number, or boolean) is refused with pydantic's
reason instead of being quietly converted, so a client learns its mistake on the first call. An
integer that names a row or a page (an attempt id, an offset) is capped at SQLite's largest
integer: beyond it SQLite cannot bind the value, and the call would fail as an internal error.

Use the field constraints before WHOLE in an Annotated type (`Annotated[StrictInt, Field(ge=..),
WHOLE]`): pydantic then publishes them as minimum/maximum in the JSON schema.
"""

from __future__ import annotations

from typing import Any

from pydantic import BeforeValidator

SQLITE_MAX_INT = 2**63 - 1  # the largest integer SQLite stores; no id or offset beyond it names a row


def _whole(value: Any) -> Any:
    """JSON Schema counts 5.0 as an integer (a number with no fraction), so it is taken as 5; anything else is
    left for the strict check, which refuses strings, booleans and fractions."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


WHOLE = BeforeValidator(_whole)
