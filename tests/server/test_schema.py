"""Every tool's input and output schema (and title, description, annotations) against a snapshot, so
an accidental change to the public interface fails here. To change it deliberately:

    MARATHON_UPDATE_SNAPSHOTS=1 PYTHONPATH=. python -m pytest tests/server/test_schema.py

and commit tests/snapshots/tool_schemas.json with the change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from server.app import build_app
from server.service import Service
from state import EventLog

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "tool_schemas.json"


def current_schemas(home: Path) -> dict[str, Any]:
    service = Service(log=EventLog(home / "marathon.db"), cache_dir=home / "cache")
    try:
        app = build_app(service)

        async def main() -> Any:
            async with Client(app) as c:
                return (await c.list_tools()).tools

        tools = anyio.run(main)
    finally:
        service.close()
    return {t.name: {"title": t.title, "description": t.description,
                     "annotations": t.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
                     if t.annotations else None,
                     "input_schema": t.input_schema, "output_schema": t.output_schema}
            for t in sorted(tools, key=lambda t: t.name)}


def test_tool_schemas_match_the_snapshot(tmp_path: Path) -> None:
    schemas = current_schemas(tmp_path)
    if os.environ.get("MARATHON_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(schemas, indent=2, sort_keys=True) + "\n")
    assert SNAPSHOT.exists(), "no snapshot: run with MARATHON_UPDATE_SNAPSHOTS=1 to create it"
    expected = json.loads(SNAPSHOT.read_text())
    changed = sorted(name for name in set(schemas) | set(expected) if schemas.get(name) != expected.get(name))
    assert not changed, (f"tool schemas changed: {changed}. If deliberate, regenerate with "
                         "MARATHON_UPDATE_SNAPSHOTS=1 and commit tests/snapshots/tool_schemas.json")
