"""The arguments the three drivers share, under one name each, checked where the driver is built.

:class:`~retryctl.nodes.ControlledToolNode`, :class:`~retryctl.nodes.ControlledStep` and
:class:`~retryctl.middleware.RetryController` take the same names for the same things:

=============== ==============================================================================
``groups``      group name -> equivalent tools, each a tool or the name of one
``policy``      a :class:`~retryctl.controller.Policy`
``budget``      a :class:`~retryctl.controller.Budget` (the limits; each driver says of what)
``run_ledger``  a :class:`~retryctl.controller.Ledger` (or a step of one) shared with other drivers
``log``         a :class:`~retryctl.audit.DecisionLog`, or the path of one (its directory must exist)
``breaker``     a :class:`~retryctl.controller.Breaker`
``prices``      a :class:`~retryctl.controller.PriceTable`
``backoff``     a :class:`~retryctl.nodes.WaitRetryAfter`
``journal``     a :class:`~retryctl.nodes.ToolJournal`
``timeout_s``   seconds > 0, or ``None`` for no bound
``clock``       ``() -> float``; ``sleep`` ``(seconds) -> None``; ``asleep`` its awaitable twin
=============== ==============================================================================

and ``tracer_provider``: an OpenTelemetry ``TracerProvider`` (an instance, not a ``Tracer``), or ``None``
for the application's global one; the gateway and ``run_batch`` check theirs with the same function.

:func:`check_arguments` validates what a driver was given with one pydantic model and turns the first
problem into a :class:`~retryctl.exceptions.ConfigError` whose ``field`` is the argument's path as the
caller wrote it (``groups['arithmetic'][1]``, ``policy``, ``log``): a mistake surfaces where the graph
is built, not as an ``AttributeError`` at the first call inside a run. A dict where a policy or a
budget goes is refused, not converted: each argument takes one kind of value (and the message says how
to build it). :func:`model_backends` does the same for a step's models.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Annotated, Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError

from retryctl._paths import PathError, check_output
from retryctl.audit import DecisionLog
from retryctl.controller import Breaker, Budget, Ledger, Policy, PriceTable, StepLedger
from retryctl.exceptions import ConfigError
from retryctl.models import ModelBackend
from retryctl.nodes._backoff import WaitRetryAfter
from retryctl.nodes._journal import ToolJournal
from retryctl.telemetry._provider import check_tracer_provider

__all__ = ["DriverArguments", "check_arguments", "instance_of", "model_backends", "open_log", "waits"]

M = TypeVar("M", bound="DriverArguments")
Sleep = Callable[[float], None]
ASleep = Callable[[float], Awaitable[None]]


def instance_of(*kinds: type, hint: str = "") -> PlainValidator:
    """A validator taking ``None`` or an instance of ``kinds``; anything else is named with its type."""
    want = " or a ".join(k.__name__ for k in kinds)

    def check(value: object) -> object:
        if value is None or isinstance(value, kinds):
            return value
        if isinstance(value, dict):
            raise ValueError(f"must be a {want} (e.g. {kinds[0].__name__}(**the_dict)), not dict")
        raise ValueError(f"must be a {want}, not {type(value).__name__}{hint}")

    return PlainValidator(check)


def _callable(value: object) -> object:
    if value is None or callable(value):
        return value
    raise ValueError(f"must be callable, not {type(value).__name__}")


def _timeout(value: object) -> object:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError("must be > 0, or None for no bound")
    return float(value)


def _member(value: object) -> object:
    if isinstance(value, BaseTool) or (isinstance(value, str) and value):
        return value
    raise ValueError("must be a tool or a tool's name (wrap a function with @tool)")


def open_log(value: object) -> DecisionLog | None:
    """``value`` as a decision log: a log as it is, a path opened as one (its directory must exist:
    a ``DecisionLog`` makes no directories, and neither does this)."""
    if value is None or isinstance(value, DecisionLog):
        return value
    if not isinstance(value, str | os.PathLike):
        raise ConfigError(field="log", value=value, problem="must be a DecisionLog or a path to one")
    try:
        # The checks every command runs on an output (a missing or unwritable directory, a directory
        # or FIFO given as the file), said in one line before the file is opened.
        check_output(value, "log")
        return DecisionLog(value)
    except PathError as exc:
        raise ConfigError(field="log", value=value, problem=exc.problem) from None
    except OSError as exc:
        raise ConfigError(field="log", value=value, problem=f"cannot open: {exc.strerror or exc}") from None


def _tracer_provider(value: object) -> object:
    try:
        return check_tracer_provider(value)
    except ConfigError as exc:
        raise ValueError(exc.problem) from None


def _log(value: object) -> object:
    try:
        return open_log(value)
    except ConfigError as exc:
        raise ValueError(exc.problem) from None


_Tools = Annotated[list[Annotated[BaseTool | str, PlainValidator(_member)]], Field(min_length=1)]

_PROBLEMS = {
    # pydantic's own checks of the groups' shape, said in the project's words
    ("groups", "dict_type"): "must map a group name to its tools ({'name': [tool, 'tool_name']})",
    ("groups", "list_type"): "must be a non-empty list of tools",
    ("groups", "too_short"): "must be a non-empty list of tools",
}


class DriverArguments(BaseModel):
    """What a driver was given, checked (see the module docstring); every field defaults to unset."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True, extra="forbid")

    groups: dict[str, _Tools] | None = None
    """Group name -> its tools in the order to try them, each a tool or a tool's name."""
    policy: Annotated[Policy | None, instance_of(Policy)] = None
    budget: Annotated[Budget | None, instance_of(Budget)] = None
    run_ledger: Annotated[
        Ledger | StepLedger | None,
        instance_of(Ledger, StepLedger, hint=": give budget=Budget(...) for limits alone"),
    ] = None
    ledger: Annotated[
        Ledger | StepLedger | None,
        instance_of(Ledger, StepLedger, hint=": give budget=Budget(...) for limits alone"),
    ] = None
    """``ControlledToolNode``'s former name of ``run_ledger``."""
    breaker: Annotated[Breaker | None, instance_of(Breaker)] = None
    prices: Annotated[PriceTable | None, instance_of(PriceTable)] = None
    backoff: Annotated[WaitRetryAfter | None, instance_of(WaitRetryAfter)] = None
    journal: Annotated[ToolJournal | None, instance_of(ToolJournal)] = None
    timeout_s: Annotated[float | None, PlainValidator(_timeout)] = None
    clock: Annotated[Callable[[], float] | None, PlainValidator(_callable)] = None
    sleep: Annotated[Sleep | None, PlainValidator(_callable)] = None
    asleep: Annotated[ASleep | None, PlainValidator(_callable)] = None
    tracer_provider: Annotated[Any, PlainValidator(_tracer_provider)] = None
    """An OpenTelemetry ``TracerProvider`` (``retryctl.telemetry._provider``), or ``None``: the global one."""
    log: Annotated[DecisionLog | None, PlainValidator(_log)] = None
    """Last: it opens the file, once everything else is known to be right."""


def check_arguments(kind: type[M], /, **given: Any) -> M:
    """``given`` checked as ``kind`` (:class:`DriverArguments` or a driver's subclass of it), or the
    first problem as a :class:`~retryctl.exceptions.ConfigError` naming the argument."""
    try:
        return kind.model_validate(given)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        loc = [part for part in error["loc"] if part != "[key]"]
        field = str(loc[0]) + "".join(f"[{part!r}]" for part in loc[1:])
        said = str(error["msg"]).removeprefix("Value error, ")
        problem = _PROBLEMS.get((str(loc[0]), error["type"]), said)
        raise ConfigError(field=field, value=error.get("input"), problem=problem) from None


def waits(sleep: Sleep | None, asleep: ASleep | None) -> tuple[Sleep, ASleep]:
    """The driver's sync and async waits: ``time.sleep``/``asyncio.sleep`` where none is given.

    A ``sleep`` given without ``asleep`` is the wait under ``ainvoke`` too, run in a worker thread
    (``asyncio.to_thread``) so the event loop goes on meanwhile. Refusing it instead would make every
    caller with a blocking wait (a test's recorder, a simulated clock) write its async twin by hand,
    and a ``sleep`` silently replaced by ``asyncio.sleep`` waits for real where the caller meant not to.
    The executor has few workers: give ``asleep`` too where many calls wait at once for real.
    """
    if sleep is None or sleep is time.sleep:
        # time.sleep's awaitable twin is asyncio.sleep: no thread, where a batch's many waiting tasks
        # would queue for the executor's few workers.
        return time.sleep, asleep if asleep is not None else asyncio.sleep
    if asleep is None:
        given = sleep

        async def asleep_in_thread(seconds: float) -> None:
            await asyncio.to_thread(given, seconds)

        asleep = asleep_in_thread
    return sleep, asleep


def model_backends(models: object) -> list[ModelBackend]:
    """A step's equivalence group as backends: a LangChain chat model is wrapped in
    :class:`~retryctl.models.LangChainBackend` (its own temperature and ``max_tokens`` apply); anything
    else that is not a backend is a ``ConfigError`` naming ``models[i]``."""
    # A str is iterable too, and so is any pydantic model (a tool: its fields): take them whole, so the
    # error names the thing given, not its first letter or field.
    whole = ModelBackend | BaseChatModel | str | BaseModel
    single = isinstance(models, whole) or not isinstance(models, Iterable)
    group = [models] if single else list(models)  # type: ignore[call-overload]
    if not group:
        raise ConfigError(field="models", value=models, problem="needs at least one model backend")
    backends: list[ModelBackend] = []
    for i, given in enumerate(group):
        member = given
        if isinstance(given, BaseChatModel):
            from retryctl.models import LangChainBackend  # only for a chat model: it imports openai

            member = LangChainBackend(given)
        if not isinstance(member, ModelBackend):
            problem = (
                "not a model backend: give a retryctl.models backend, or a LangChain chat model "
                "(wrapped in retryctl.models.LangChainBackend for you)"
            )
            raise ConfigError(field=f"models[{i}]", value=member, problem=problem)
        backends.append(member)
    return backends
