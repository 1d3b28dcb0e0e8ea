"""The log's key formats are a contract with every log already written: a client resuming a run finds the
server's record of its call by key, so a format may not change under an existing log. Pinned here."""

from __future__ import annotations

from state import keys


def test_intent_keys_hold_the_run_and_the_clients_call_id() -> None:
    assert keys.intent("r1", "r1/7", "abc") == "intent:r1:r1/7:abc"
    assert keys.intent(None, "c", "abc") == "intent:-:c:abc"  # outside any run
    assert keys.intent("r1", "r1/7", "abc").startswith(keys.intent_prefix("r1", "r1/7"))
    assert not keys.intent("r1", "r1/70", "abc").startswith(keys.intent_prefix("r1", "r1/7"))
    assert keys.intent("r1", "r1/70", "abc").startswith(keys.intent_prefix("r1"))  # any call of the run
    assert not keys.intent("r10", "r10/1", "abc").startswith(keys.intent_prefix("r1"))


def test_the_other_formats() -> None:
    assert keys.tool_result(42) == "result:42"
    assert keys.agent_result("r1", 3) == "result:r1:3"
    assert keys.run_start("r1") == "run.start:r1"
    assert keys.compaction("r1", 9) == "compaction:r1:9"
    assert keys.census("sha", "softmax", "bench", "NVIDIA H200") == "census:sha:softmax:bench:NVIDIA H200"
    fields = {"problem": "softmax", "shape": "bench", "gpu": "NVIDIA H200"}
    assert keys.baseline(fields) == keys.baseline(dict(reversed(list(fields.items()))))  # order-free
    assert keys.baseline(fields).startswith("baseline:") and keys.baseline(fields) != keys.baseline({**fields,
                                                                                                   "shape": "small"})


def test_meta_names() -> None:
    assert (keys.META_RUN, keys.META_SESSION, keys.META_CALL) == (
        "kernel-marathon/run", "kernel-marathon/session", "kernel-marathon/call_id")
