"""A driver's own say on errors: ``retry_on=`` (LangChain's meaning) and a ``classify=`` hook.

Every driver (``ControlledToolNode``, ``ControlledStep``, ``RetryController``) takes both and builds its
classifier once, at construction, with :func:`error_classifier`, which checks them (a
:class:`~retryctl.exceptions.ConfigError` naming the argument) and returns what the driver calls on each
failure in place of :func:`~retryctl.controller.classify`:

1. ``classify=``: a function of the exception returning an :class:`~retryctl.controller.ErrorClass`, a
   :class:`~retryctl.controller.Classification`, or ``None`` to leave it to what follows. Given a class,
   the HTTP facts (status, ``Retry-After``) of the default classification are kept.
2. ``retry_on=``: as in LangChain's ``ToolRetryMiddleware`` and ``ModelRetryMiddleware``, a tuple of
   exception types (``isinstance``) or a predicate of the exception; a matching exception is retried
   (transient, whatever the default says). One that does not match keeps its default class, but is
   never retried: a default of transient becomes terminal (switch to the next member of the group, or
   stop, which with LangChain's ``on_failure="continue"`` means the error goes back as a message). A
   validation error still goes back to the model to fix, a semantic one is still refined. Unlike
   LangChain, one exception class alone (``retry_on=TimeoutError``) is taken as that class, not called
   as a predicate (which would retry everything).
3. Otherwise :func:`~retryctl.controller.classify`, which honours an exception's own ``is_retryable``.

Both see the exception the tool or model raised, under retryctl's own wrapper of it (a model backend's
``BackendError`` raised from the SDK's error). Neither sees what the controller decides itself: its own
refusals (an open breaker, a spent budget, a breaker store failing closed) and cancellation
(``KeyboardInterrupt``, ``CancelledError``), which are never retried. A hook or predicate that raises
lets its error out of the driver, as LangChain's does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from retryctl.controller._error_class import Classification, ErrorClass, make
from retryctl.controller._errors import classify as _classify
from retryctl.exceptions import BreakerOpen, BreakerStoreError, BudgetExceeded, ConfigError, RetryctlError

__all__ = ["Classifier", "ClassifyHook", "RetryOn", "error_classifier"]

RetryOn: TypeAlias = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
"""Exception types, or a predicate of the exception: those to retry."""
ClassifyHook: TypeAlias = Callable[[BaseException], ErrorClass | Classification | None]
"""A user's classification of an exception; ``None`` leaves it to the default."""
Classifier: TypeAlias = Callable[[BaseException], Classification]
"""What a driver calls on each failure."""

_OWN = (BreakerOpen, BudgetExceeded, BreakerStoreError)


def error_classifier(*, retry_on: RetryOn | None = None, classify: ClassifyHook | None = None) -> Classifier:
    """The classifier a driver uses (see the module docstring): :func:`~retryctl.controller.classify`
    itself when neither is given."""
    types, predicate = _check_retry_on(retry_on)
    if classify is not None:
        _check_callable("classify", classify, "a function of the exception returning an ErrorClass")
    if retry_on is None and classify is None:
        return _classify
    return _Rules(types=types, predicate=predicate, hook=classify)


@dataclass(frozen=True, slots=True)
class _Rules:
    types: tuple[type[BaseException], ...] | None
    predicate: Callable[[BaseException], bool] | None
    hook: ClassifyHook | None

    def __call__(self, exc: BaseException) -> Classification:
        found = _classify(exc)
        if isinstance(exc, _OWN) or not isinstance(exc, Exception):
            return found
        raised = _outside(exc)
        if self.hook is not None:
            said = self.hook(raised)
            if said is not None:
                return _from_hook(exc, said, found, self.hook)
        if self.types is None and self.predicate is None:
            return found
        matched = isinstance(raised, self.types) if self.types is not None else _truth(self.predicate, raised)
        if matched:
            if found.retryable:
                return found
            return make(
                exc,
                ErrorClass.TRANSIENT,
                f"retry_on matches it (by default: {found.error_class.value}, {found.reason})",
                retry_after_s=found.retry_after_s,
                status_code=found.status_code,
            )
        if not found.retryable:
            return found
        return make(
            exc,
            ErrorClass.TERMINAL,
            f"{found.reason}; not retried: retry_on does not match it",
            status_code=found.status_code,
        )


def _outside(exc: BaseException) -> BaseException:
    """The exception the tool or model raised, under retryctl's wrapper of it (a model backend's
    ``BackendError`` raised from the SDK's error)."""
    for _ in range(8):
        cause = exc.__cause__
        if not isinstance(exc, RetryctlError) or cause is None:
            break
        exc = cause
    return exc


def _truth(predicate: Callable[[BaseException], bool] | None, exc: BaseException) -> bool:
    assert predicate is not None
    return bool(predicate(exc))


def _from_hook(exc: BaseException, said: object, found: Classification, hook: ClassifyHook) -> Classification:
    if isinstance(said, Classification):
        return said
    if isinstance(said, str) and not isinstance(said, ErrorClass) and said in ErrorClass._value2member_map_:
        said = ErrorClass(said)
    if not isinstance(said, ErrorClass):
        raise ConfigError(
            field="classify",
            value=said,
            problem=f"returned {type(said).__name__} for {type(exc).__name__}: "
            "must return an ErrorClass, a Classification or None",
        )
    name = getattr(hook, "__qualname__", None) or type(hook).__name__
    return make(
        exc,
        said,
        f"classify hook {name}: {said.value} (by default: {found.error_class.value}, {found.reason})",
        retry_after_s=found.retry_after_s,
        status_code=found.status_code,
    )


def _check_retry_on(
    retry_on: object,
) -> tuple[tuple[type[BaseException], ...] | None, Callable[[BaseException], bool] | None]:
    if retry_on is None:
        return None, None
    if isinstance(retry_on, type):
        retry_on = (retry_on,)
    if isinstance(retry_on, tuple | list):
        for i, kind in enumerate(retry_on):
            if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                raise ConfigError(field=f"retry_on[{i}]", value=kind, problem="must be an exception class")
        return tuple(retry_on), None
    if isinstance(retry_on, (str | bytes, Sequence)) or not callable(retry_on):
        raise ConfigError(
            field="retry_on",
            value=retry_on,
            problem="must be a tuple of exception classes or a predicate taking the exception",
        )
    _check_callable("retry_on", retry_on, "a predicate taking the exception")
    return None, retry_on


def _check_callable(field: str, value: object, want: str) -> None:
    if not callable(value) or isinstance(value, type):
        raise ConfigError(field=field, value=value, problem=f"must be {want}")
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # a builtin without a signature: it is called and judged then
        return
    try:
        signature.bind(BaseException())
    except TypeError:
        raise ConfigError(
            field=field, value=value, problem=f"must be {want}: it cannot be called with one argument"
        ) from None
