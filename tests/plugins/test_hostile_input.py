"""Hostile input: whatever a transcript holds or a module answers, the readers
and answer checks answer (a reading, a problem, a refusal) and never raise."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.plugins.broker import Broker, check_search_answer
from router.plugins.limit_checks import Limits, _check_decision, _check_report
from router.plugins.loader import LoadedModule, Loader
from router.plugins.usage import TOKEN_KINDS, check_turn_answer, check_usage

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
LIMITS = {"tokens": {"instances": {"a": {"limit": 5, "since": "2026-01-01T00:00:00Z"}}}}

loader = Loader(log=lambda entry: None)
loader.load({"usage-source": ["claude-transcript"]}, only=["usage-source"])
TRANSCRIPT = loader.module("usage-source", "claude-transcript").module


@given(json_values)
def test_answer_checks_never_raise(value) -> None:
    for problem in (
        check_search_answer(value),
        check_turn_answer(value, first=False),
        _check_decision(value, "allow", LIMITS),
        _check_decision(value, "stop", LIMITS),
        _check_report(value, LIMITS),
    ):
        assert problem is None or isinstance(problem, str)
    assert check_usage(value) in (True, False)


@given(json_values)
def test_limits_fail_closed_on_any_answer(value) -> None:
    import types

    module = types.ModuleType("hostile")
    module.may_launch = lambda args: value
    module.must_stop = lambda args: value
    module.report = lambda args: value
    loaded = LoadedModule("limit-check", "hostile", module)
    limits = Limits(broker=Broker(log=lambda e: None), log=lambda e: None)
    now = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
    subject = {"instance": "a", "provider": None, "model": None, "account": None}
    refusal = limits.may_launch(switched_on=["hostile"], modules=[loaded], limits=LIMITS,
                                subject=subject, records=[], now=now)
    assert refusal is None or refusal.code in ("limit-reached", "limit-check-failed")
    if refusal is None:
        assert value == {"allow": True}
    stop = limits.must_stop(switched_on=["hostile"], modules=[loaded], limits=LIMITS,
                            subject=subject, records=[], now=now)
    assert (stop is None) == (value == {"stop": False})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.binary(max_size=300), during=st.binary(max_size=600))
def test_transcript_reader_on_arbitrary_bytes(tmp_path: Path, before: bytes, during: bytes) -> None:
    path = tmp_path / f"t-{abs(hash((before, during)))}.jsonl"
    path.write_bytes(before)

    async def run():
        request = {"session": "s", "reach": {"via": "mod-link"}, "transcript": str(path),
                   "options": {}}
        first = await TRANSCRIPT.read_turn({**request, "mark": None}, {"env": {}})
        with open(path, "ab") as f:
            f.write(during)
        return first, await TRANSCRIPT.read_turn({**request, "mark": first["mark"]}, {"env": {}})

    first, second = trio.run(run)
    assert check_turn_answer(first, first=True) is None
    assert check_turn_answer(second, first=False) is None
    usage = second["usage"]
    assert usage is None or set(usage) == set(TOKEN_KINDS)
    # Nothing is read past the last newline.
    data = before + during
    assert second["mark"]["offset"] <= data.rfind(b"\n") + 1 or second["mark"]["offset"] == 0
