"""Every error retryctl raises, in one tree.

Errors are split by audience, as in pydantic-ai and httpx: a *control signal* is part of normal control
flow and carries the data a caller needs to act on it; a *misuse* error means the caller passed something
wrong and must change their code or input; a *runtime failure* is something outside that broke.

    RetryctlError
    ├── ControlSignal                 (normal control flow, carries its data)
    │   ├── BudgetExceeded            a ledger limit is spent, or a call's estimate would pass it
    │   ├── BreakerOpen               a circuit breaker refuses calls to a key until ``retry_at``
    │   └── SemanticError             an output is well-formed but judged wrong: names the check
    ├── UsageError                    (misuse: fix the code or the input)
    │   ├── ConfigError               a configuration value is invalid: names the field
    │   ├── UnknownPolicyError        a stopping-policy name is not known
    │   └── FileFormatError           a line of an input file is malformed: names the file and line
    │       ├── BankFormatError       ... of a sample bank
    │       └── TaskFormatError       ... of a batch task or results file
    ├── RuntimeFailure                (something outside broke)
    │   ├── LogIntegrityError         a decision log's hash chain is broken: names the first bad record
    │   ├── BackendError              a model call failed (subtree in retryctl.models: transient,
    │   │                             malformed response, terminal; each declares its error_class)
    │   ├── SandboxUnavailable        no isolating sandbox tier can run here (and unsafe=True was not given)
    │   ├── SandboxError              the sandbox itself failed to start or answer (never the job's failure)
    │   └── BreakerStoreError         a circuit breaker's store (Redis, SQLite) could not be read or written
    └── MissingExtra                  (an ImportError too) a feature needs an extra of ``pip install
                                      retryctl`` that is not installed: names the extra

A retryctl error may declare how ``retryctl.controller.classify`` should treat it through the class
attribute ``error_class`` (``"transient"``, ``"validation"``, ``"semantic"`` or ``"terminal"``); ``None``
leaves the decision to the classifier. Model backends use this so that a 429 they raise stays retryable.

Config validated by pydantic raises ``pydantic.ValidationError``, which names the field itself; the
``ConfigError`` here covers checks pydantic cannot express in one field (and CLI arguments).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

__all__ = [
    "BankFormatError",
    "BreakerOpen",
    "BreakerStoreError",
    "BudgetExceeded",
    "ConfigError",
    "ControlSignal",
    "FileFormatError",
    "LogIntegrityError",
    "MissingExtra",
    "RetryctlError",
    "RuntimeFailure",
    "SandboxError",
    "SandboxUnavailable",
    "SemanticError",
    "TaskFormatError",
    "UnknownPolicyError",
    "UsageError",
]


class RetryctlError(Exception):
    """Base of every error raised by retryctl."""

    error_class: ClassVar[str | None] = None
    """How ``classify`` treats this error: ``transient``, ``validation``, ``semantic``, ``terminal``, or
    ``None`` to let the classifier decide (retryctl errors it does not know are terminal, but a
    ``RuntimeFailure`` raised from another exception is judged by that exception)."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own pickling calls ``cls(*self.args)``, which a keyword-only constructor
        # refuses (``BudgetExceeded(message)`` is a TypeError): the error could not cross a process
        # pool or a multiprocessing queue. Rebuilt without the constructor instead: its message and
        # every attribute come back as they were.
        return (_restored, (type(self), self.args), dict(self.__dict__))


def _restored(cls: type[RetryctlError], args: tuple[Any, ...]) -> RetryctlError:
    """An error of ``cls`` with ``args``, made without calling its constructor (see ``__reduce__``)."""
    error = cls.__new__(cls)
    error.args = args
    return error


class ControlSignal(RetryctlError):
    """Part of normal control flow: carries the data a caller needs to decide what to do next."""


class BudgetExceeded(ControlSignal):
    """A ledger limit is spent, or a call's reservation was refused because it would pass it.

    ``limit_name`` is the field of :class:`~retryctl.controller.Budget` (``"samples"``, ``"usd"``, ...),
    ``limit`` its value, ``value`` the total compared with the limit (``used + reserved + requested``).
    When the ledger raised it, ``used`` is what committed calls really spent (the elapsed seconds for
    ``wall_s``), ``reserved`` what calls in flight hold, and ``requested`` the refused call's estimate
    (0 when nothing was asked for: the limit is simply spent); ``used`` is ``None`` for an error built
    with a bare ``value``. The message tells the two cases apart: ``... is spent (8 of 8)`` when
    committed use reached the limit, ``... would be exceeded: 90 estimated for this call + 20 spent > limit
    100`` when no call was made because its estimate did not fit (no apostrophe in either: the audit
    groups reasons by their quoted names).
    """

    def __init__(
        self,
        *,
        limit_name: str,
        limit: float,
        value: float,
        scope: str = "run",
        used: float | None = None,
        reserved: float = 0.0,
        requested: float = 0.0,
    ) -> None:
        self.limit_name = limit_name
        self.limit = limit
        self.value = value
        self.scope = scope
        self.used = used
        self.reserved = reserved
        self.requested = requested
        super().__init__(self._sentence())

    @property
    def spent(self) -> bool:
        """Whether committed use reached the limit (else a reservation would have passed it)."""
        if self.used is None:
            return False
        return self.used >= self.limit or not (self.requested or self.reserved)

    def _sentence(self) -> str:
        head = f"{self.scope} budget {self.limit_name!r}"
        if self.used is None:
            return f"{head} exceeded: {self.value:g} > limit {self.limit:g}"
        if self.spent:
            return f"{head} is spent ({self.used:g} of {self.limit:g})"
        if self.limit_name == "wall_s":  # calls overlap in time: nothing is held, the clock runs
            return (
                f"{head} would be exceeded: up to {self.requested:g}s for this call + "
                f"{self.used:g}s elapsed > limit {self.limit:g}s"
            )
        held = f" + {self.reserved:g} held by calls in flight" if self.reserved else ""
        return (
            f"{head} would be exceeded: {self.requested:g} estimated for this call + "
            f"{self.used:g} spent{held} > limit {self.limit:g}"
        )


class BreakerOpen(ControlSignal):
    """The circuit breaker of ``key`` is open; a half-open probe is allowed from ``retry_at`` (a reading
    of the breaker's clock, for programs), ``wait_s`` seconds after the refusal when known.

    The message says the wait in whole seconds, rounded up, never the clock reading: a monotonic clock's
    reading means nothing to a person or to another process.
    """

    def __init__(self, *, key: str, retry_at: float, failures: int, wait_s: float | None = None) -> None:
        self.key = key
        self.retry_at = retry_at
        self.failures = failures
        self.wait_s = wait_s
        when = "once its cool-down ends" if wait_s is None else f"in {math.ceil(max(0.0, wait_s))} s"
        super().__init__(f"breaker {key!r} is open after {failures} failures; a probe is allowed {when}")


class SemanticError(ControlSignal):
    """An output is well-formed but judged wrong: a failed check or too low a confidence.

    Raise it from a validator or a tool to ask for a ``refine``. ``check`` names the check, ``detail``
    says what it found, ``confidence`` is the score that was too low, when there is one.
    """

    def __init__(self, *, check: str, detail: str = "", confidence: float | None = None) -> None:
        self.check = check
        self.detail = detail
        self.confidence = confidence
        score = "" if confidence is None else f" (confidence {confidence:.2f})"
        super().__init__(f"check {check!r} failed{score}" + (f": {detail}" if detail else ""))


class UsageError(RetryctlError, ValueError):
    """The caller passed something invalid."""


class ConfigError(UsageError):
    """A configuration value is invalid. ``field`` names it, ``value`` is what was given."""

    def __init__(self, *, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"invalid {field}={value!r}: {problem}")


class UnknownPolicyError(UsageError):
    """A stopping-policy name is not one of the known names."""

    def __init__(self, *, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"unknown policy {name!r}; known: {', '.join(known)}")


class FileFormatError(UsageError):
    """A line of an input file is malformed. ``line`` is 1-based."""

    def __init__(self, *, path: str, line: int, problem: str) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        super().__init__(f"{path}:{line}: {problem}")


class BankFormatError(FileFormatError):
    """A sample bank line is malformed."""


class TaskFormatError(FileFormatError):
    """A batch task or results file line is malformed."""


class RuntimeFailure(RetryctlError):
    """Something outside retryctl's control broke."""


class LogIntegrityError(RuntimeFailure):
    """A decision log failed verification. ``index`` is the 0-based record number, ``line`` 1-based."""

    def __init__(self, *, path: str, line: int, index: int, problem: str) -> None:
        self.path = path
        self.line = line
        self.index = index
        self.problem = problem
        super().__init__(f"{path}:{line} (record {index}): {problem}")


class SandboxUnavailable(RuntimeFailure):
    """No isolating tier works on this machine; ``reasons`` says why, tier by tier."""

    def __init__(self, *, wanted: str, reasons: dict[str, str]) -> None:
        self.wanted = wanted
        self.reasons = reasons
        detail = "; ".join(f"{tier}: {why}" for tier, why in reasons.items())
        super().__init__(
            f"no sandbox tier available for {wanted!r} ({detail}). Install bubblewrap "
            "(apt-get install bubblewrap) or pass unsafe=True to run code WITHOUT isolation"
        )


class SandboxError(RuntimeFailure):
    """The sandbox machinery failed (it could not start, or its worker stopped answering)."""

    def __init__(self, *, tier: str, problem: str) -> None:
        self.tier = tier
        self.problem = problem
        super().__init__(f"{tier} sandbox failed: {problem}")


class BreakerStoreError(RuntimeFailure):
    """A circuit breaker's store could not be read or written: Redis down, SQLite locked or unwritable.

    ``store`` names the store (its URL or path), ``operation`` what was being done (``update``,
    ``get``, ``clock``...), ``problem`` the underlying error's one-line summary. It is transient: the
    store may come back. :meth:`~retryctl.controller.Breaker.admit` turns it into a decision (fail
    open or fail closed, as :class:`~retryctl.controller.BreakerConfig` says) instead of raising it.
    """

    error_class: ClassVar[str | None] = "transient"

    def __init__(self, *, store: str, operation: str, problem: str) -> None:
        self.store = store
        self.operation = operation
        self.problem = problem
        super().__init__(f"breaker store {store} failed ({operation}): {problem}")


class MissingExtra(RetryctlError, ImportError):
    """A feature needs an optional extra of ``pip install retryctl`` that is not installed.

    ``feature`` names what was asked for (``retryctl serve``, ``OpenAIBackend``), ``extra`` the extra
    that carries it (``gateway``, ``openai``; the list is in ``retryctl._extras``), ``module`` the module
    that could not be imported. An :class:`ImportError`, so ``except ImportError`` around an optional
    import still catches it.
    """

    def __init__(self, *, feature: str, extra: str, module: str | None = None) -> None:
        self.feature = feature
        self.extra = extra
        self.module = module
        super().__init__(f"{feature} needs the {extra!r} extra: pip install 'retryctl[{extra}]'")
