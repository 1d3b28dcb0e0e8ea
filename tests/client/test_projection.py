"""The run's projection from its events: what budgets are measured against."""

from __future__ import annotations

from client.run_projection import RunState
from state.record import Event

_SPEC = {"problem": "softmax", "shape": "bench", "budget": {"hours": 1.0}}


def _event(eid: int, ts: float, kind: str, payload: dict | None = None) -> Event:
    return Event(id=eid, ts=ts, run_id="r", kind=kind, payload=payload or {})


def test_time_between_sessions_is_not_active_time() -> None:
    state = RunState("r")
    state.fold(_event(1, 1000.0, "run.start", {"spec": _SPEC}))
    state.fold(_event(2, 1100.0, "model.turn"))
    state.fold(_event(3, 1200.0, "run.end", {"state": "budget"}))
    # Three hours later the run is resumed and goes on for 50 s.
    state.fold(_event(4, 12000.0, "run.resume", {"extend": {"budget": {"hours": 2.0}}}))
    state.fold(_event(5, 12050.0, "model.turn"))
    assert state.sessions == [[1000.0, 1200.0], [12000.0, 12050.0]]
    assert state.active_seconds() == 250.0
    left = state.budget_left(now=12050.0)["hours"]
    assert left is not None and abs(left - (2.0 - 250.0 / 3600)) < 1e-9
