"""Adapters for the in-process daemon in the turns tests: turns the test
holds open, with or without the ``steer`` capability; the echo adapter
reporting usage."""

from __future__ import annotations


import trio

from router.daemon import AdapterContext, AdapterTurn
from router.daemon.adapters.echo import EchoSession, emit_answer
from wire.container import AdapterInfo, ContainerInput, ContainerOutcome, Done, input_text


class GateAdapter:
    """Answers ``got: <text>`` (with `` + <steered>`` for texts steered in).
    A text starting ``hold`` waits for :attr:`gate`. ``steers`` sets the
    capability it reports; its sessions can steer either way, so a wrong
    ``whenBusy: "steer"`` would show."""

    def __init__(self, *, steers: bool) -> None:
        capabilities = ("steer",) if steers else ()
        self.info = AdapterInfo(id="gate", version="1", capabilities=capabilities)
        self.gate = trio.Event()
        #: Operation ids of turns that started, in order.
        self.started: list[str] = []
        self._started_changed = trio.Event()

    async def wait_started(self, count: int) -> None:
        while len(self.started) < count:
            await self._started_changed.wait()

    def _mark(self, operation_id: str) -> None:
        self.started.append(operation_id)
        self._started_changed.set()
        self._started_changed = trio.Event()

    async def open(self, context: AdapterContext) -> GateSession:
        return GateSession(self, context)


class GateSession:
    def __init__(self, adapter: GateAdapter, context: AdapterContext) -> None:
        self._adapter = adapter
        self._context = context
        self._steered: list[str] = []

    async def run(self, turn: AdapterTurn) -> ContainerOutcome:
        text = input_text(turn.input)
        self._adapter._mark(turn.operation_id)
        if text.startswith("hold"):
            await self._adapter.gate.wait()
        answer = "got: " + text + "".join(f" + {each}" for each in self._steered)
        self._steered.clear()
        emit_answer(self._context, turn.operation_id, answer)
        return Done(text=answer)

    async def steer(self, input: ContainerInput) -> bool:
        self._steered.append(input_text(input))
        return True

    async def close(self) -> None:
        pass


class UsageAdapter:
    """The echo adapter, reporting ``usage`` at the start of every turn:
    ``input_tokens`` and ``output_tokens`` (as a model call would). A turn
    whose text is a key of ``gates`` waits for that event first."""

    def __init__(
        self, *, input_tokens: int = 3, output_tokens: int = 2, steers: bool = True,
        gates: dict[str, trio.Event] | None = None,
    ) -> None:
        self.info = AdapterInfo(id="usage-echo", version="1", capabilities=("steer",) if steers else ())
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.gates = dict(gates or {})

    async def open(self, context: AdapterContext) -> UsageSession:
        return UsageSession(self, context)


class UsageSession(EchoSession):
    def __init__(self, adapter: UsageAdapter, context: AdapterContext) -> None:
        super().__init__(context)
        self._adapter = adapter

    async def run(self, turn: AdapterTurn) -> ContainerOutcome:
        self._context.emit(
            {"type": "usage", "inputTokens": self._adapter.input_tokens, "outputTokens": self._adapter.output_tokens}
        )
        gate = self._adapter.gates.get(input_text(turn.input))
        if gate is not None:
            await gate.wait()
        return await super().run(turn)
