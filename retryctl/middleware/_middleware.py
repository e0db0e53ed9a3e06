"""``RetryController``: the retryctl controller as one LangChain v1 ``create_agent`` middleware."""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Literal, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain.agents.structured_output import AutoStrategy, ProviderStrategy, ToolStrategy
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command

from retryctl.audit import DecisionLog
from retryctl.controller import (
    AttemptEngine,
    Breaker,
    BreakerConfig,
    Budget,
    Clock,
    EquivalenceLike,
    Policy,
    PriceTable,
)
from retryctl.controller._clock import monotonic
from retryctl.controller._error_rules import ClassifyHook, RetryOn, error_classifier
from retryctl.exceptions import ConfigError
from retryctl.middleware._carry import read_record
from retryctl.middleware._config import MiddlewareArguments, check_fallbacks, group_tools
from retryctl.middleware._drive import adrive, drive
from retryctl.middleware._models import ModelCalls, model_step_id
from retryctl.middleware._runs import RUN_KEY, RetryControlState, Run, RunBook
from retryctl.middleware._tools import ToolCalls
from retryctl.nodes._arguments import check_arguments, waits
from retryctl.nodes._backoff import WaitRetryAfter
from retryctl.nodes._events import Emitter
from retryctl.nodes._journal import MemoryToolJournal, ToolJournal
from retryctl.nodes._tool_calls import TOOL_POLICY, ControlledToolCalls
from retryctl.nodes._tool_state import ArgsAdapter, ResultValidator, ToolResult
from retryctl.telemetry import Tracing

__all__ = ["MODEL_BREAKER", "MODEL_POLICY", "RetryController"]

MODEL_POLICY = Policy(weights={"validators": 1.0, "agreement": 1.0})
"""The default policy of model calls: an answer is judged by its checks (its tool calls fit their
tools, its structured output parses); with ``sample_final=True`` a final answer by its agreement.
A final answer drawn once has nothing to check: it is accepted unchecked (no confidence)."""

MODEL_BREAKER = BreakerConfig(failure_threshold=2, cooldown_s=30.0)
"""The thresholds of the breaker ``RetryController`` keeps per model by default: open after 2
consecutive failed calls (transient or terminal faults of the model's own, each HTTP try one), then
skip the model for 30 s, then let one probe call through (a success closes it, a failure opens it for
another 30 s). Two, not one: a single blip gets its retry on the same model, as the policy says; a
model that fails twice in a row is skipped on every later call, turn and run of the middleware until
its probe, where ``ModelFallbackMiddleware`` calls it first on every model call. It routes only: a
model call with no fallback left to route to is not refused by it."""


class RetryController(AgentMiddleware[RetryControlState, Any, Any]):
    """Every model call and tool call of a ``create_agent`` agent under one controller, one budget
    and one decision log. It does the work of LangChain's ``ToolRetryMiddleware``,
    ``ModelRetryMiddleware``, ``ModelFallbackMiddleware``, ``ModelCallLimitMiddleware``,
    ``ToolCallLimitMiddleware`` and, for the calls the controller escalates,
    ``HumanInTheLoopMiddleware``::

        agent = create_agent(
            model,
            tools=[multiply],
            middleware=[RetryController(groups={"arithmetic": [multiply, multiply_backup]},
                                        budget=Budget(attempts=20), log="decisions.jsonl")],
            checkpointer=InMemorySaver(),  # ask_user interrupts need one
        )

    The hooks:

    - A run is the agent's work on the user's latest message: the first call after a new user message
      opens it, with a fresh ledger under ``budget``. Its record (id and spend) is kept in the agent
      state (``retryctl_run``) by each model call, so a run resumed after an interrupt goes on with
      the same ledger. A middleware instance serves any number of runs and threads at once; each run
      has its own ledger.
    - ``wrap_tool_call`` / ``awrap_tool_call`` run each call as
      :class:`~retryctl.nodes.ControlledToolNode` runs it: transient faults are retried with
      backoff (at least the server's ``Retry-After``), a failing tool switches to the next member of
      its group, bad arguments and failed validators come back to the model as an error
      ``ToolMessage`` naming the check (refine), a budget or breaker stop is an error ``ToolMessage``
      saying which (``retryctl stopped this tool call: run budget 'attempts' is spent (1 of 1)...``), and
      ``ask_user`` interrupts. Each attempt is charged ``attempts`` on the run's ledger.
    - ``wrap_model_call`` / ``awrap_model_call`` run each model call under the same engine: errors are
      classified (:func:`~retryctl.controller.classify`); transient ones retried with backoff; a
      terminal one (or retries used up) switches to the next of ``fallback_models``
      (``request.override(model=...)``); tool calls naming an unknown tool or with arguments that do
      not fit the tool's schema, and structured output that does not parse, are refined: the model
      gets its message back with feedback naming the field. Each call costs one ``attempts`` and one
      ``samples``, plus its tokens (``usage_metadata``) and, with ``prices``, its USD. When the budget
      is spent the agent ends with an ``AIMessage`` saying which limit. A model that failed twice in a
      row is skipped for the next fallback until its breaker's probe (``model_breaker``, on by
      default), across turns and runs. Models are called without their clients' own retries
      (``ChatOpenAI``'s ``max_retries``, the ``openai`` client's): each HTTP try is one attempt,
      charged, logged and counted by the breaker (``retryctl.models._client_retries``).
    - With ``sample_final=True`` a final answer (no tool calls, checks passed) is drawn again, each
      draw a model call, until ``model_policy``'s stopping rule stops (the first answer is the first
      sample; at least ``min_samples``, at most ``max_samples`` draws, fewer if a draw fails or the
      budget refuses one), and one verdict judges their agreement. The agent gets a draw of the answer
      that verdict names (the first draw of the stopping rule's leader, not the first draw), and the
      record names it: ``candidates_summary["answers"]`` lists the draws' answers, ``["chosen"]``
      the index of the draw returned.

    ``ask_user`` is a LangGraph ``interrupt()`` (the agent needs a checkpointer) whose payload is
    retryctl's (``type: "retryctl.ask_user"``, reason, evidence, options, and ``tool_call_id`` for a
    tool call). Resume with ``Command(resume=reply)``, where ``reply`` is retryctl's
    (``{"action": "accept" | "answer" | "extend" | "stop", ...}``) or a ``HumanInTheLoopMiddleware``
    decision, alone or as ``{"decisions": [decision]}``: ``approve`` means ``accept`` (keep the result),
    ``respond`` means ``answer`` (its ``message`` is the result), ``reject`` means ``stop``. ``edit``
    and ``extend`` have no counterpart in the other format. Each tool call runs as its own task in
    ``create_agent``, so questions of parallel calls are separate interrupts: answer them together
    with ``Command(resume={interrupt.id: reply, ...})``. A model call that asks (a policy with
    ``on_budget_exhausted="ask_user"``, or ``ask_user`` in its ``low_confidence`` ladder) is run again
    from its start on resume, as LangGraph re-runs an interrupted node.

    The ledgers live in this process (the latest 1024 runs, see :meth:`run`); a run's spend is also
    written to the state after each model call and to the ``journal`` at each interrupt, so a run
    resumed in another process (give a :class:`~retryctl.nodes.SQLiteToolJournal`), or forgotten
    here, counts on from it. What is carried and what is not: ``retryctl.middleware._carry``.
    """

    state_schema = RetryControlState

    def __init__(
        self,
        *,
        groups: Mapping[str, Sequence[BaseTool | str]] | None = None,
        policy: Policy | None = None,
        model_policy: Policy | None = None,
        budget: Budget | None = None,
        log: DecisionLog | str | os.PathLike[str] | None = None,
        breaker: Breaker | None = None,
        model_breaker: Breaker | BreakerConfig | None = MODEL_BREAKER,
        fallback_models: Sequence[BaseChatModel | str] = (),
        validators: Mapping[str, Sequence[ResultValidator]] | None = None,
        adapters: Mapping[str, ArgsAdapter] | None = None,
        prices: PriceTable | None = None,
        sample_final: bool = False,
        equivalence: EquivalenceLike | None = None,
        interactive: bool = True,
        on_failure: Literal["continue", "error"] = "continue",
        journal: ToolJournal | None = None,
        backoff: WaitRetryAfter | None = None,
        timeout_s: float | None = None,
        stream_events: bool = False,
        clock: Clock = monotonic,
        sleep: Callable[[float], None] | None = None,
        asleep: Callable[[float], Awaitable[None]] | None = None,
        retry_on: RetryOn | None = None,
        classify: ClassifyHook | None = None,
        tracer_provider: Any = None,
    ) -> None:
        """Every argument is optional and keyword-only.

        - ``groups``: group name -> equivalent tools in the order to try them, each a tool or the name
          of one of the agent's tools (``{"arithmetic": [multiply, multiply_backup]}``). Tools given
          here are registered with the agent (the middleware's ``tools``), so a backup the agent was
          not given can still run; a name is looked up among the agent's tools at the first call.
        - ``policy``: the verdict policy of tool calls (default ``TOOL_POLICY``; its
          ``weights["validators"]`` must be > 0). ``model_policy``: that of model calls (default
          :data:`MODEL_POLICY`); its ``min_samples``/``max_samples``/``stopping`` drive
          ``sample_final``.
        - ``budget``: the limits of each agent run (:class:`~retryctl.controller.Budget`: attempts,
          samples, tokens, USD, wall time), one ledger shared by its model and tool calls.
        - ``log``: a :class:`~retryctl.audit.DecisionLog`, or a path to open one at (in a directory
          that exists: a missing one is a ``ConfigError`` naming it); every verdict is
          a record (``retryctl audit`` verifies the file). ``stream_events``: also write each verdict
          to LangGraph's custom stream (``stream_mode="custom"``).
        - ``tracer_provider``: the OpenTelemetry tracer provider of the spans (a span per model call
          and tool call, a child per attempt, the verdict an event on it: :mod:`retryctl.telemetry`);
          ``None`` (the default): the application's global provider, if it set one (retryctl sets none).
        - ``breaker``: the tools' :class:`~retryctl.controller.Breaker`, keyed by tool name (none by
          default).
        - ``model_breaker``: the models' breaker, keyed by model name, on by default with
          :data:`MODEL_BREAKER`'s thresholds: a model that failed twice in a row is skipped for the
          fallback until its probe, across turns and runs of this middleware. A ``BreakerConfig``
          gives other thresholds (in memory, on ``clock``; it only routes: with no fallback the call
          goes on as the policy says). A ``Breaker`` is used as it is, with its store (a
          :class:`~retryctl.runtime.SQLiteBreakerStore` or ``RedisBreakerStore`` remembers across
          processes), and refuses even a model with no fallback while open. ``None``: no breaker.
        - ``fallback_models``: models to switch to, in order, when the agent's model fails (a chat
          model, or a ``"provider:model"`` string for ``init_chat_model``).
        - ``validators``, ``adapters``, ``journal``, ``timeout_s``: per tool, as for
          :class:`~retryctl.nodes.ControlledToolNode` (use a
          :class:`~retryctl.nodes.SQLiteToolJournal` when a run may resume in another process).
        - ``prices``: a :class:`~retryctl.controller.PriceTable` by model name, to charge USD.
        - ``sample_final``: sample final answers adaptively (off by default; the answer returned is
          a draw of the accepted answer); ``equivalence``: how a final answer's text becomes the
          answer voted on (default: the controller's).
        - ``on_failure``: what a call that fails for good becomes (an error no retry, switch or refine
          got past: a tool's bug with no backup, a model error with no fallback left). ``"continue"``
          (the default, as in ``ToolRetryMiddleware`` and ``ModelRetryMiddleware``): an error
          ``ToolMessage`` as ToolNode makes it, or an ``AIMessage`` saying why the agent stopped;
          ``"error"``: the exception is raised, ending the run. Budget and breaker stops are
          always messages.
        - ``interactive``: ``False`` when nobody can answer (CI, a batch): ``ask_user`` then ends the
          call as a stop instead of interrupting.
        - ``backoff``, ``clock``, ``sleep``, ``asleep``: waits and time, injectable so tests never wait
          (a ``sleep`` given alone also serves the async hooks, in a worker thread).
        - ``retry_on``: the exceptions to retry, as LangChain's ``ToolRetryMiddleware`` and
          ``ModelRetryMiddleware`` take them (a tuple of exception classes, or a predicate of the
          exception), for tool and model calls alike; one it does not match is never retried (a transient
          one becomes terminal: a switch, or ``on_failure``). ``classify``: a function of the exception
          returning an :class:`~retryctl.controller.ErrorClass`, or ``None`` for the default
          (:func:`~retryctl.controller.error_classifier`).

        The arguments ``ControlledToolNode`` and ``ControlledStep`` take too have the same names and
        meaning there, and are checked the same way (``retryctl.nodes._arguments``): a wrong one is a
        :class:`~retryctl.exceptions.ConfigError` naming it, raised here.
        """
        super().__init__()
        classifier = error_classifier(retry_on=retry_on, classify=classify)
        if on_failure not in ("continue", "error"):
            raise ConfigError(field="on_failure", value=on_failure, problem="must be 'continue' or 'error'")
        args = check_arguments(
            MiddlewareArguments,
            groups=groups,
            policy=policy,
            model_policy=model_policy,
            budget=budget,
            breaker=breaker,
            model_breaker=model_breaker,
            prices=prices,
            journal=journal,
            backoff=backoff,
            timeout_s=timeout_s,
            clock=clock,
            sleep=sleep,
            asleep=asleep,
            tracer_provider=tracer_provider,
            log=log,
        )
        self.log = args.log
        self.tracing = Tracing(args.tracer_provider)
        """The spans of the agent's model and tool calls (:mod:`retryctl.telemetry`)."""
        self.emitter = Emitter(self.log, stream=stream_events, tracing=self.tracing)
        self.groups: dict[str, list[BaseTool | str]] = dict(args.groups or {})
        self.tools = group_tools(self.groups)
        journal = journal if journal is not None else MemoryToolJournal()
        self.runs = RunBook(budget or Budget(), clock=clock, journal=journal)
        self.sleep, self.asleep = waits(sleep, asleep)
        self.backoff = backoff or WaitRetryAfter()
        self._tool_settings: dict[str, Any] = {
            "validators": validators,
            "adapters": adapters,
            "policy": policy or TOOL_POLICY,
            "breaker": breaker,
            "emitter": self.emitter,
            "journal": journal,
            "backoff": self.backoff,
            "sleep": self.sleep,
            "asleep": self.asleep,
            "clock": clock,
            "timeout_s": timeout_s,
            # An error that ends a call becomes ToolNode's error message, or is raised.
            "handle_tool_errors": on_failure == "continue",
            "retry_on": retry_on,
            "classify": classify,
        }
        # Checked now, where the fields can be named, not at the first tool call inside a run.
        self._tool_calls: dict[frozenset[str], ToolCalls] = {}
        self._tool_lock = threading.Lock()
        self._build_tool_calls({t.name: t for t in self.tools}, names_known=False)
        model_policy = model_policy or MODEL_POLICY
        if not interactive:
            model_policy = _without_asking(model_policy)
            self._tool_settings["policy"] = _without_asking(self._tool_settings["policy"])
        self.model_policy = model_policy
        if isinstance(model_breaker, BreakerConfig):
            model_breaker, alone = Breaker(model_breaker, clock=clock), False
        else:
            alone = True
        self.model_breaker = model_breaker
        """The models' breaker (``None``: off); its ``store`` holds their states."""
        self.models = ModelCalls(
            fallbacks=check_fallbacks(fallback_models),
            engine=AttemptEngine(
                policy=model_policy,
                backoff=self.backoff.for_retry,
                refine_in_place=True,
                interactive=interactive,
                grant={"attempts": 1},
            ),
            extra_tools={t.name: t for t in self.tools},
            breaker=model_breaker,
            breaker_alone=alone,
            emitter=self.emitter,
            prices=prices,
            clock=clock,
            sample_final=sample_final,
            equivalence=equivalence,
            on_failure=on_failure,
            classifier=classifier,
        )

    # -- runs ---------------------------------------------------------------------------------------

    def run(self, run: str | Mapping[str, Any]) -> Run | None:
        """The run of this id or record (``state["retryctl_run"]``, e.g. from
        ``agent.get_state(config)``), while the middleware still holds it (the most recent 1024 runs)."""
        run_id = read_record(run, where="run")[0]
        return None if run_id is None else self.runs.find(run_id)

    # -- model calls --------------------------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ExtendedModelResponse[Any]:
        """Run the model call under the controller (see the class docstring); the model node's
        update also writes the run's record (what it spent so far) to the state."""
        run = self._run(request.state)
        flow = self.models.flow(request, run, _structured_tools(request))
        with self.runs.saved_at_interrupt(run), self._model_span(request):
            response = drive(flow, handler, self.sleep)
            return _recorded(response, run)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ExtendedModelResponse[Any]:
        """The async twin of :meth:`wrap_model_call`."""
        run = self._run(request.state)
        flow = self.models.flow(request, run, _structured_tools(request))
        with self.runs.saved_at_interrupt(run), self._model_span(request):
            response = await adrive(flow, handler, self.asleep)
            return _recorded(response, run)

    # -- tool calls ---------------------------------------------------------------------------------

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolMessage | Command[Any]:
        """Run the tool call under the controller (see the class docstring)."""
        run = self._run(request.state)
        with self.runs.saved_at_interrupt(run):
            result = self._tools_for(request).wrap(request, handler, run)
        return cast("ToolMessage | Command[Any]", result)  # or a list of them, as ``handler`` returned

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]
    ) -> ToolMessage | Command[Any]:
        """The async twin of :meth:`wrap_tool_call`."""
        run = self._run(request.state)
        with self.runs.saved_at_interrupt(run):
            result = await self._tools_for(request).awrap(request, handler, run)
        return cast("ToolMessage | Command[Any]", result)

    # -- shared -------------------------------------------------------------------------------------

    def _model_span(self, request: ModelRequest[Any]) -> AbstractContextManager[None]:
        """The model call's span, ``retryctl.step model:N`` (its name counted only when traced)."""
        if not self.tracing.active:
            return nullcontext()
        return self.tracing.step(model_step_id(request))

    def _run(self, state: object) -> Run:
        return self.runs.meet(state)

    def _tools_for(self, request: ToolCallRequest) -> ToolCalls:
        """The controlled calls over the agent's tools (the ToolNode's, from the request's runtime)
        and the groups' (built once per set of tools: one middleware may serve several agents)."""
        given = list(getattr(request.runtime, "tools", None) or [])
        if request.tool is not None:
            given.append(request.tool)
        tools = {t.name: t for t in given if isinstance(t, BaseTool)} | {t.name: t for t in self.tools}
        return self._build_tool_calls(tools, names_known=True)

    def _build_tool_calls(self, tools: dict[str, BaseTool], *, names_known: bool) -> ToolCalls:
        key = frozenset(tools)
        with self._tool_lock:
            held = self._tool_calls.get(key)
            if held is not None:
                return held
            groups = self.groups
            if not names_known:
                # At construction only the groups' own tools are known: a name is checked at the
                # first call, against the agent's tools.
                groups = {g: [m for m in ms if isinstance(m, BaseTool)] for g, ms in groups.items()}
            settings = dict(self._tool_settings)
            if not names_known:
                settings["validators"] = {
                    k: v for k, v in (settings["validators"] or {}).items() if k in tools
                }
            calls = ToolCalls(ControlledToolCalls(tools, groups=groups, **settings))
            if names_known:
                self._tool_calls[key] = calls
            return calls


def _recorded(response: ModelResponse[Any], run: Run) -> ExtendedModelResponse[Any]:
    """``response`` with the run's record as a state update of the model node (a node that ends
    normally is the only place the state can be written); the journal's copy is no longer needed."""
    run.paused = False
    return ExtendedModelResponse(model_response=response, command=Command(update={RUN_KEY: run.record()}))


def _without_asking(policy: Policy) -> Policy:
    """``policy`` for a run nobody can answer: no ``ask_user`` step, a spent budget stops."""
    ladder = tuple(step for step in policy.low_confidence if step != "ask_user")
    return policy.model_copy(update={"low_confidence": ladder, "on_budget_exhausted": "stop"})


def _structured_tools(request: ModelRequest[Any]) -> frozenset[str]:
    """The names of the structured-output tools LangChain answers itself (not tools to check)."""
    fmt = request.response_format
    if fmt is None or isinstance(fmt, ProviderStrategy):
        return frozenset()
    if not isinstance(fmt, ToolStrategy):  # AutoStrategy, or a bare schema: may become a ToolStrategy
        fmt = ToolStrategy(schema=fmt.schema if isinstance(fmt, AutoStrategy) else fmt)
    return frozenset(spec.name for spec in fmt.schema_specs)
