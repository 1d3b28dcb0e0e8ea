"""The L2 regime of a profile, from the surfaces to the job and back, without a worker: the MCP tool and the
service hand `l2` to the pool job, the report's timings carry it, and a warm timing never competes with the
(cold) best attempts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from server.app import build_app
from server.service import Service
from state import EventLog
from tests.server.common import STARTER


class JudgedPool:
    """A pool whose profile jobs come back verified and timed in the regime they asked for."""

    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []

    def warm(self) -> dict[str, Any]:
        return {"device": {"name": "test GPU"}}

    def run(self, job: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.jobs.append(job)
        if job["op"] == "census":
            return {"status": "passed"}
        timing = {"median_us": 5.0, "mode": "cuda_graph", "reps": 30, "l2": job["l2"]}
        return {"problem": job["problem"], "shape": job["shape"], "ok": True, "correct": True, "verified": True,
                "max_rel_err": 0.0, "timing": timing, "device": {"name": "test GPU"},
                "baseline": {"name": "torch", "median_us": 10.0, "l2": job["l2"]}, "speedup": 2.0,
                "verification": {"by": "judge:v1+bounds", "census": None}}

    def close(self) -> None:
        pass


def _service(home: Path, pool: JudgedPool) -> Service:
    return Service(log=EventLog(home / "marathon.db"), pool=pool, cache_dir=home / "cache")  # type: ignore[arg-type]


def test_the_mcp_tool_asks_the_judge_for_warm_and_reports_it(tmp_path: Path) -> None:
    pool = JudgedPool()
    service = _service(tmp_path, pool)
    try:
        async def main() -> Any:
            async with Client(build_app(service)) as c:
                return await c.call_tool("profile", {"problem": "softmax", "source": STARTER, "l2": "warm"})

        result = anyio.run(main)
    finally:
        service.close()
    assert [j["l2"] for j in pool.jobs] == ["warm"]
    out = result.structured_content
    assert out["timing"]["l2"] == "warm" and out["baseline"]["l2"] == "warm"


def test_a_warm_timing_is_not_censused_nor_verified_and_its_attempt_says_warm(tmp_path: Path) -> None:
    pool = JudgedPool()
    service = _service(tmp_path, pool)
    try:
        warm = service.profile("softmax", STARTER, l2="warm")
        cold = service.profile("softmax", STARTER + "\n# another source\n")
        attempts = {a["id"]: a for a in service.attempts(problem="softmax")}
        best = service.best("softmax")
    finally:
        service.close()
    assert [j["op"] for j in pool.jobs] == ["profile", "profile", "census"], "only the cold timing is censused"
    assert [j["l2"] for j in pool.jobs if j["op"] == "profile"] == ["warm", "cold"]
    assert warm.verified is False and warm.verification is not None
    assert warm.verification["census"]["status"] == "not_needed"
    assert cold.verified is True
    assert attempts[warm.attempt_id]["l2"] == "warm" and attempts[cold.attempt_id]["l2"] == "cold"
    assert best is not None and best["id"] == cold.attempt_id
