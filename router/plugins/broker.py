"""The broker: every call into a plug-in module goes through here.

A module is someone else's code running with the router's authority. The
broker makes each call one that cannot hurt the caller:

- an ``async`` function runs inside a cancel scope with the call's deadline
  (``trio.move_on_after``). A module that has not answered by then is
  cancelled (Trio delivers ``Cancelled`` at its next checkpoint; an httpx
  request in flight is closed), and the caller gets the refusal ``deadline``.
  A module that catches the cancellation and answers anyway is still refused
  ``deadline``: its answer came after its time;
- a plain function is called directly (it cannot be cancelled: plain
  functions are the kinds whose calls are pure decisions over data); an
  awaitable answer from one is ``malformed-answer``, and the coroutine is
  closed so it never runs;
- an exception with a code of the refusal shape (``Refusal``, or any
  exception with such a ``code``) becomes a refusal with that code; any other
  exception becomes the refusal code the caller names (``check-threw``,
  ``search-failed`` ...), with the exception's type and text. ``Cancelled``
  and ``KeyboardInterrupt`` are never caught.

Answers come back wrapped in :class:`ModuleAnswer` so that a module answering
``None`` is not mistaken for a refusal.

The broker also serves web search (:meth:`Broker.search`) from the one
switched-on ``search-source`` module.

Error handling: nothing a module does escapes :meth:`Broker.call` except
``Cancelled`` from the caller's own scopes. Resource handling: the broker
holds no resources; a module's own (an HTTP client) are closed by the module,
inside the cancelled scope.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Mapping

import attrs
import trio

from router.plugins.loader import LoadedModule, Log, Loader, default_log
from router.plugins.models import SearchAnswer, answer_as
from router.errors import Refusal, code_of

__all__ = ["Broker", "BrokerStatistics", "DEFAULT_DEADLINES", "ModuleAnswer", "check_search_answer"]

#: Seconds each async function gets by default (the broker's own choice: the Mosaic
#: plug-in layer's README sets none). A search over the network is the slowest honest call; a
#: usage read is a bounded file or store read; preflight and version may run
#: a subprocess. ``None``: no deadline (a channel's dispatch carries the
#: person's operation, whose own deadline belongs to the core).
DEFAULT_DEADLINES: Mapping[str, float | None] = {
    "search": 10.0,
    "read_turn": 5.0,
    "preflight": 10.0,
    "version": 10.0,
    "dispatch": None,
}


@attrs.frozen(kw_only=True)
class BrokerStatistics:
    """What :meth:`Broker.statistics` answers: the calls made, and how many
    ended in a refusal."""

    calls: int
    refusals: int


@attrs.frozen
class ModuleAnswer:
    """What a module answered (any value, ``None`` included)."""

    value: Any


def _crash(module: LoadedModule, function: str, exc: Exception, crash_code: str) -> Refusal:
    code = code_of(exc)
    if code is not None:
        message = getattr(exc, "message", None)
        return Refusal(code=code, message=message if type(message) is str else str(exc))
    return Refusal(
        code=crash_code,
        message=f'the {module.kind} module "{module.name}" raised in {function}: '
        f"{type(exc).__name__}: {exc}",
    )


class Broker:
    """Calls plug-in functions under deadlines and turns failures into refusals."""

    def __init__(
        self,
        *,
        deadlines: Mapping[str, float | None] | None = None,
        log: Log | None = None,
    ) -> None:
        self._deadlines = dict(DEFAULT_DEADLINES)
        self._deadlines.update(deadlines or {})
        self._log = log or default_log
        self._calls = 0
        self._refusals = 0

    def __repr__(self) -> str:
        return f"<Broker calls={self._calls} refusals={self._refusals}>"

    def statistics(self) -> BrokerStatistics:
        return BrokerStatistics(calls=self._calls, refusals=self._refusals)

    def call_sync(
        self, module: LoadedModule, function: str, *args: Any, crash_code: str = "plugin-threw"
    ) -> ModuleAnswer | Refusal:
        """Call a plain function of ``module``."""
        self._calls += 1
        try:
            value = module.function(function)(*args)
        except Exception as exc:
            return self._refused(_crash(module, function, exc, crash_code))
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()  # never run it, and no "never awaited" warning
            return self._refused(Refusal(
                code="malformed-answer",
                message=f'{function} of the {module.kind} module "{module.name}" answered with '
                "an awaitable; it must answer at once with a plain value",
            ))
        return ModuleAnswer(value)

    async def call(
        self,
        module: LoadedModule,
        function: str,
        *args: Any,
        deadline: float | None | str = "default",
        crash_code: str = "plugin-threw",
    ) -> ModuleAnswer | Refusal:
        """Await an async function of ``module`` under its deadline."""
        if deadline == "default":
            deadline = self._deadlines.get(function, 10.0)
        self._calls += 1
        seconds = math.inf if deadline is None else float(deadline)  # type: ignore[arg-type]
        scope = trio.move_on_after(seconds)
        try:
            with scope:
                value = await module.function(function)(*args)
        except Exception as exc:
            # Caught outside the scope, so it also catches what is left of an
            # exception group once the scope has taken its own Cancelled out
            # (a module whose nursery failed while it was being cancelled).
            # A Cancelled from the caller's scopes is a BaseException and
            # goes through.
            if scope.cancel_called:
                return self._refused(self._late(module, function, seconds))
            return self._refused(_crash(module, function, exc, crash_code))
        if scope.cancel_called:
            # Cancelled and stopped (cancelled_caught), or cancelled and
            # answered anyway: either way it did not answer in time.
            return self._refused(self._late(module, function, seconds))
        return ModuleAnswer(value)

    def _late(self, module: LoadedModule, function: str, seconds: float) -> Refusal:
        return Refusal(
            code="deadline",
            message=f'the {module.kind} module "{module.name}" did not answer {function} within '
            f"{seconds:g} s and was cancelled; try again, or switch on another module",
        )

    def _refused(self, refusal: Refusal) -> Refusal:
        self._refusals += 1
        return refusal

    # ----------------------------------------------------------------- search

    async def search(
        self,
        loader: Loader,
        query: str,
        *,
        options: Mapping[str, Any] | None = None,
        deps: Mapping[str, Any] | None = None,
    ) -> dict[str, Any] | Refusal:
        """Search through the switched-on ``search-source`` module.

        ``options`` is the settings' options object for search sources
        (module name -> that module's options). Answers
        ``{"query", "total", "results": [{"title", "url", "snippet"}]}``.
        """
        if type(query) is not str or not query.strip():
            return Refusal(code="empty-query", message="give a search query with some text in it")
        modules = loader.modules("search-source")
        if not modules:
            refused = loader.refused("search-source")
            why = f" (its module was refused: {refused.code})" if refused else ""
            return Refusal(
                code="search-off",
                message=f"no search-source module is switched on{why}; run `router plugins` and "
                '`router plugins set --file PATCH` with {"search-source": "searxng-url"} or another',
            )
        module = modules[0]
        module_options = dict((options or {}).get(module.name) or {})
        answer = await self.call(
            module, "search", module_options, query, dict(deps or {}), crash_code="search-failed"
        )
        if isinstance(answer, Refusal):
            self._log({"event": "search-refused", "module": module.name, **answer.data, "code": answer.code, "message": answer.message})
            return answer
        problem = check_search_answer(answer.value)
        if problem is not None:
            refusal = Refusal(
                code="malformed-answer",
                message=f'the search-source module "{module.name}" answered in the wrong shape: '
                f"{problem}",
            )
            self._log({"event": "search-refused", "module": module.name, **refusal.data, "code": refusal.code, "message": refusal.message})
            return refusal
        return answer.value


def check_search_answer(value: object) -> str | None:
    """What is wrong with a search answer, or ``None`` when it is
    ``{"query": str, "total": count, "results": [{"title", "url", "snippet"}]}``
    with strings throughout (:class:`~router.plugins.models.SearchAnswer`,
    through the plug-in layer's converter)."""
    parsed = answer_as(value, SearchAnswer, what="the answer")
    if isinstance(parsed, Refusal):
        return parsed.message
    if parsed.total < len(parsed.results):
        return "total is less than the number of results"
    return None
