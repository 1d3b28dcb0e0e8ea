"""`tuner`: a policy with no model. A search over the launch space a kernel declares, one profile a step.

A kernel declares what may be tuned in module-level literals beside the constants they name
(client.search.space): `TUNE_SPACE = {"BLOCK_N": [16, 32, 64], "NUM_WARPS": [2, 4, 8]}` and, optionally,
`TUNE_CONSTRAINTS = {why: expression}`, the combinations ruled out before they are tried. The tuner
starts from the best kernel in the log (the `best` tool), else the problem's starter
(`problem://{name}/starter`), or from the starter or the solution when told to (`start`); a kernel that
declares no space is searched over the problem's own declared space where it sets those constants, and
otherwise the tuner says why nothing can be tuned.

Each step is one of, in this order:
- a second profile of a timed configuration faster than the current best, before it may lead (noise:
  client.search.noise);
- a note naming a newly confirmed best, its numbers and the confidence (when `notes` is on);
- a profile of the next configuration: the kernel's own first, then Optuna's TPE over the space, its
  study rebuilt from the log for every proposal (client.search.optimiser), with failures (compile errors,
  wrong results, refusals, timeouts) told as penalised trials;
- when no valid configuration is left untried, a note with what was found, then the end of the run
  (SPACE_EXHAUSTED, which `status` shows as the run's end reason).
The budget, a met target or an exhausted space end a run; nothing else does.

Everything the search knows is read back from the event log (client.search.history), so a resumed run
picks up with the same trials and proposes what the uninterrupted run would have.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from client.fingerprint import attempt_key
from client.policy import ToolCall, Turn, TurnContext
from client.search.declared import kernel_text
from client.search.ending import NEW_BEST, NOTHING_TO_TUNE, SPACE_EXHAUSTED, nothing_to_tune, space_exhausted
from client.search.history import LogHistory, Trial
from client.search.noise import confidence, describe_timing, remeasure_options, standing
from client.search.optimiser import Optimiser, Proposal
from client.search.source import (
    Config,
    TuneSpaceError,
    Variants,
    literal_constants,
    module_constants,
    rewrite,
    tune_space,
)
from client.search.space import Key, SearchSpace
from state import EventLog

__all__ = ["NEW_BEST", "NOTHING_TO_TUNE", "SPACE_EXHAUSTED", "TuneSpaceError", "TunerPolicy", "Variants", "describe",
           "module_constants", "nothing_to_tune", "rewrite", "space_exhausted", "tune_space"]

STARTS = ("best", "starter", "solution")
COUNT_LIMIT = 1_000_000  # valid configurations counted at most, for the texts (the search itself needs no count)


def describe(config: Config, center: Config) -> str:
    changed = [f"{k}={v!r} (from {center.get(k)!r})" for k, v in config.items() if center.get(k) != v]
    return ", ".join(changed) if changed else "the base configuration as it is"


@dataclass
class Search:
    """One search: the base kernel, its space, and the trials folded from the log."""

    base: str
    space: SearchSpace
    current: Config  # the base's own values of the knobs
    origin: str  # where the base and its space come from, in words
    size: int  # valid configurations (at least, when not complete)
    complete: bool
    variants: Variants
    history: LogHistory
    optimiser: Optimiser

    def size_text(self) -> str:
        n = f"{self.size:,}" if self.complete else f"over {self.size:,}"
        c = len(self.space.constraints)
        return (f"{len(self.space.knobs)} knobs, {n} valid configurations of {self.space.raw_size:,} "
                f"({c} constraint{'' if c == 1 else 's'})")


class TunerPolicy:
    """Model-free policy: a noise-aware TPE search over the kernel's declared space, until the budget is
    spent, the target is met, or no valid configuration is left."""

    name = "tuner"
    summarizes = False

    def __init__(self, model: str | None = None, *, seed: int = 0, remeasure: int = 1, start: str = "best",
                 notes: bool = True, log: Any = None, **options: Any) -> None:
        if start not in STARTS:
            raise ValueError(f"start must be one of {', '.join(STARTS)}, not {start!r}")
        if not 0 <= int(remeasure) <= 2:
            raise ValueError("remeasure must be 0, 1 or 2 (extra profiles before a configuration may lead)")
        self.model = model or "tuner"
        self.options = {"seed": int(seed), "remeasure": int(remeasure), "start": start, "notes": bool(notes),
                        **options}
        self._log = log
        self._asked: dict[str, str] = {}  # call id -> what it was for ("best", "starter")
        self._search: Search | None = None
        self._said_origin = False
        self._counter = 0
        self._session = uuid.uuid4().hex[:6]  # call ids stay unique across restarts of the run
        self._taken: set[Key] = set()  # configurations whose source the log holds under another name
        self._rendered: dict[Key, str] = {}

    # -- the turn -----------------------------------------------------------------------------------

    def next_turn(self, context: TurnContext) -> Turn:
        goal = context.pinned["goal"]
        problem, shape = goal["problem"], goal.get("shape") or "bench"
        if self._search is None:
            started = self._start(context, problem, shape)
            if isinstance(started, Turn):
                return started
            self._search = started
        search = self._search
        search.history.refresh()
        return self._decide(context, search, problem, shape)

    def _decide(self, context: TurnContext, s: Search, problem: str, shape: str) -> Turn:
        tried = context.pinned.get("tried") or {}
        trials = s.history.trials
        needed = 1 + self.options["remeasure"]
        st = standing(trials, needed, lambda t: self._remeasure_args(s, t, tried, problem, shape) is not None)
        if st.to_confirm is not None:
            args = self._remeasure_args(s, st.to_confirm, tried, problem, shape)
            assert args is not None
            t = st.to_confirm
            lead = (f"the best so far is {describe_timing(st.leader)}" if st.leader is not None
                    else "nothing leads yet")
            return self._call("profile", args, "remeasure",
                              f"tuner: profile trial {t.order + 1} again ({_options_text(args)}) before it may lead: "
                              f"{describe_timing(t)}; {lead} [config {_json(t.config)}]")
        if self.options["notes"] and st.leader is not None and st.leader.own and not self._noted(s, st.leader):
            text = (f"{NEW_BEST} for {problem}/{shape}: {describe(st.leader.config, s.current)}: "
                    f"{describe_timing(st.leader)}; {confidence(st.leader, st.runner_up).text()}. "
                    f"[config {_json(st.leader.config)}]")
            return self._call("note", {"text": text, "problem": problem, "shape": shape, "tags": ["tuner", "best"]},
                              "note", f"tuner: record the new best: {describe_timing(st.leader)}")
        proposal = s.optimiser.propose(trials, lambda c: self._free(s, c, tried, problem, shape),
                                       first=s.current if s.space.contains(s.current) else None)
        if proposal is not None:
            return self._profile(s, proposal, st.leader, st.runner_up, problem, shape)
        summary = self._summary(s, st.leader, st.runner_up, problem, shape)
        if not any(n.startswith(SPACE_EXHAUSTED) for n in s.history.notes):
            return self._call("note", {"text": summary, "problem": problem, "shape": shape,
                                       "tags": ["tuner", "outcome", "exhausted"]}, "note",
                              "tuner: the search space is exhausted; recording what was found")
        return Turn(text=summary, stop_reason="end_turn", model=self.model)

    # -- starting: the base kernel and its space ----------------------------------------------------

    def _start(self, context: TurnContext, problem: str, shape: str) -> Turn | Search:
        began = self._began_from(str(context.pinned.get("run_id")), problem, shape)
        if began is not None:
            return self._search_for(context, *began, problem, shape)
        start = self.options["start"]
        base: str | None = None
        origin = ""
        if start == "solution":
            base = kernel_text(problem, "solution")
            origin = f"the problem's solution (kernels/{problem}/solution.py)"
        if base is None and start == "best":
            best = context.pinned.get("best") or {}
            if best.get("source") and best.get("outcome") == "correct":
                base = str(best["source"])
                where = "this run" if best.get("scope") == "run" else "the log"
                origin = f"the best kernel in {where} (attempt #{best.get('attempt_id')})"
            elif "best" not in self._asked.values():
                return self._call("best", {"problem": problem, "shape": shape}, "best",
                                  "tuner: fetch the best kernel in the log to tune from")
        if base is None:
            base = self._starter_answer(context)
            origin = f"the problem's starter (problem://{problem}/starter)" + (
                "; the problem has no solution.py here" if start == "solution" else "")
            if base is None and "starter" not in self._asked.values():
                why = "no correct kernel in the log yet" if start == "best" else f"--tune-from {start}"
                return self._call("read_resource", {"uri": f"problem://{problem}/starter"}, "starter",
                                  f"tuner: {why}; start from the problem's starter")
            if base is None:
                return self._end(f"{NOTHING_TO_TUNE}: neither a best kernel nor the starter of {problem} could be "
                                 "read.")
        return self._search_for(context, base, origin, problem, shape)

    def _began_from(self, run_id: str, problem: str, shape: str) -> tuple[str, str] | None:
        """The kernel this run's search began from, read back from its first profile in the log: a resumed run goes
        on with the same search even when the file it started from (solution.py, the log's best) has changed since,
        instead of starting another one over a kernel its earlier trials never measured."""
        for ev in self._event_log().events(run_id=run_id, kinds=["agent.call"]):
            args = ev.payload.get("args") or {}
            if (ev.payload.get("tool") == "profile" and isinstance(args.get("source"), str)
                    and args.get("problem") == problem and (args.get("shape") or "bench") == shape):
                return args["source"], f"the kernel this run's search began from (its first profile, step " \
                                       f"{ev.payload.get('step')})"
        return None

    def _search_for(self, context: TurnContext, base: str, origin: str, problem: str, shape: str) -> Turn | Search:
        try:
            space, current = SearchSpace.from_source(base)
        except (TuneSpaceError, SyntaxError) as exc:
            found = self._fallback_space(base, origin, problem, exc)
            if isinstance(found, str):
                return self._end(found)
            space, current, origin = found
        variants = Variants(base, space.names)
        probe = {k.name: k.choices[-1] for k in space.knobs}
        if variants.config_of(variants.render(probe)) != probe:
            return self._end(f"{NOTHING_TO_TUNE}: in {origin}, the knobs {', '.join(space.names)} are not each set "
                             "by a one-line literal assignment at module level, so the configuration of a logged "
                             "variant cannot be read back from its source.")
        size, complete = space.count(COUNT_LIMIT)
        history = LogHistory(self._event_log(), str(context.pinned.get("run_id")), problem, shape, space, variants)
        return Search(base, space, current, origin, size, complete, variants, history,
                      Optimiser(space, seed=self.options["seed"]))

    def _fallback_space(self, base: str, origin: str, problem: str,
                        error: Exception) -> str | tuple[SearchSpace, Config, str]:
        """The problem's own declared space (solution first, then starter) over the knobs this kernel sets, or
        why there is none."""
        try:
            constants = literal_constants(base)
        except SyntaxError as exc:
            return f"{NOTHING_TO_TUNE}: {origin} does not parse ({exc.msg}, line {exc.lineno})."
        reasons: list[str] = []
        chosen: tuple[tuple[int, int], str, SearchSpace, set[str]] | None = None
        for kind in ("solution", "starter"):
            text = kernel_text(problem, kind)
            if text is None:
                reasons.append(f"the problem has no {kind} here")
                continue
            try:
                declared, _ = SearchSpace.from_source(text)
            except (TuneSpaceError, SyntaxError) as exc:
                reasons.append(f"its {kind} declares no usable space ({exc})")
                continue
            present = {n for n in declared.names if n in constants}
            rank = (len(present), -len(declared.restrict(present)[1]))  # most knobs, then fewest constraints dropped
            if not present:
                reasons.append(f"it sets none of the {kind}'s knobs ({', '.join(declared.names)})")
            elif chosen is None or rank > chosen[0]:
                chosen = (rank, kind, declared, present)
        if chosen is None:
            return (f"{NOTHING_TO_TUNE}: {origin} declares no usable TUNE_SPACE ({error}), and {'; '.join(reasons)}. "
                    "Declare a TUNE_SPACE beside its constants, or tune the problem's own kernel (`marathon run "
                    "--tune-from starter` or `--tune-from solution`).")
        _, kind, declared, present = chosen
        space, dropped = declared.restrict(present)
        note = f", {len(dropped)} of its constraints dropped (they name knobs this kernel lacks)" if dropped else ""
        return space, {n: constants[n] for n in space.names}, (
            f"{origin}, which declares no TUNE_SPACE ({error}), over the {kind}'s declared space: the "
            f"{len(space.knobs)} of its knobs this kernel sets{note}")

    def _starter_answer(self, context: TurnContext) -> str | None:
        """The starter's text, when the newest answer to one of our calls is the starter resource."""
        for message in reversed(context.messages):
            if message.role != "tool" or message.tool_call_id not in self._asked:
                continue
            wanted = self._asked[message.tool_call_id] == "starter"
            if wanted and not message.is_error and "def entry" in message.content:
                return message.content
            break
        return None

    # -- steps ----------------------------------------------------------------------------------------

    def _profile(self, s: Search, proposal: Proposal, leader: Trial | None, runner_up: Trial | None,
                 problem: str, shape: str) -> Turn:
        config = proposal.config
        how = proposal.how
        if proposal.broke:
            how = f"TPE's sample broke \"{'; '.join(c.why for c in proposal.broke)}\": the nearest valid one"
        elif proposal.sample is not None:
            how = "TPE's sample was tried already: the nearest untried one"
        n, correct, failed = s.history.counts()
        failures = s.history.failures_text()
        lines = [f"tuner: trial {n + 1} ({how}): profile {describe(config, s.current)} [config {_json(config)}]",
                 f"tried {n} of {s.size:,}{'' if s.complete else '+'}: {correct} correct, {failed} failed"
                 + (f" ({failures})" if failures else "") + "; best: "
                 + (f"{describe_timing(leader)}, {confidence(leader, runner_up).text()}" if leader is not None
                    else "none timed yet")]
        if not self._said_origin:
            self._said_origin = True
            lines.insert(1, f"searching {s.origin}: {s.size_text()}; TPE, seed {self.options['seed']}, "
                            f"{1 + self.options['remeasure']} profiles before a configuration may lead")
        args = {"problem": problem, "shape": shape, "source": self._render(s, config)}
        return self._call("profile", args, "variant", "\n".join(lines))

    def _summary(self, s: Search, leader: Trial | None, runner_up: Trial | None, problem: str, shape: str) -> str:
        valid = [t for t in s.history.trials if s.space.valid(t.config)]
        failed = sum(1 for t in valid if t.failed)
        failures = s.history.failures_text()
        if leader is not None:
            best = (f"{describe(leader.config, s.current)} [config {_json(leader.config)}]: {describe_timing(leader)}; "
                    f"{confidence(leader, runner_up).text()}")
        else:
            best = "none timed (correctness only: no GPU)"
        return (f"{SPACE_EXHAUSTED}: all {len(valid):,} valid configurations of {', '.join(s.space.names)} for "
                f"{problem}/{shape} ({s.space.raw_size:,} before the constraints) are tried: {len(valid) - failed} "
                f"correct, {failed} failed" + (f" ({failures})" if failures else "") + f". Best: {best}. The launch "
                "parameters alone will not go further: the next gains need changes to the algorithm.")

    # -- helpers ------------------------------------------------------------------------------------

    def _free(self, s: Search, config: Config, tried: dict[str, Any], problem: str, shape: str) -> bool:
        """Not tried: not a trial of the history, and its source not in the log under any other name."""
        key = s.space.key(config)
        if key in s.history.by_key or key in self._taken:
            return False
        args = {"problem": problem, "shape": shape, "source": self._render(s, config)}
        if attempt_key("profile", args) in tried:
            self._taken.add(key)
            return False
        return True

    def _remeasure_args(self, s: Search, trial: Trial, tried: dict[str, Any], problem: str,
                        shape: str) -> dict[str, Any] | None:
        for options in remeasure_options(trial):
            args = {"problem": problem, "shape": shape, "source": self._render(s, trial.config), **options}
            if attempt_key("profile", args) not in tried:
                return args
        return None

    def _render(self, s: Search, config: Config) -> str:
        key = s.space.key(config)
        if key not in self._rendered:
            if len(self._rendered) > 64:
                self._rendered.clear()
            self._rendered[key] = s.variants.render(config)
        return self._rendered[key]

    def _noted(self, s: Search, trial: Trial) -> bool:
        mark = f"[config {_json(trial.config)}]"
        return any(n.startswith(NEW_BEST) and mark in n for n in s.history.notes)

    def _event_log(self) -> Any:
        if self._log is None:
            self._log = EventLog()
        return self._log

    def _call(self, tool: str, args: dict[str, Any], purpose: str, text: str) -> Turn:
        self._counter += 1
        call_id = f"tuner_{self._session}_{self._counter}_{purpose}"
        self._asked[call_id] = purpose
        return Turn(text=text, tool_calls=(ToolCall(call_id, tool, args),), model=self.model)

    def _end(self, text: str) -> Turn:
        return Turn(text=text, stop_reason="end_turn", model=self.model)


def _json(config: Config) -> str:
    return json.dumps(config, sort_keys=True)


def _options_text(args: dict[str, Any]) -> str:
    parts = [f"{k}={args[k]!r}" for k in ("graph", "baseline") if k in args]
    return ", ".join(parts) if parts else "as before"
