"""What a ledger reports: a limit that is spent or would be passed (:class:`Exhaustion`), and its state
for a verdict's evidence (:class:`LedgerSnapshot`). Plain data, apart from the ledger that makes them."""

from __future__ import annotations

from dataclasses import dataclass

from retryctl.exceptions import BudgetExceeded

__all__ = ["Exhaustion", "LedgerSnapshot"]


@dataclass(frozen=True, slots=True)
class Exhaustion:
    """A limit that is spent, or that a reservation would have passed.

    The figures are kept apart so that a message never calls an estimate a spend: ``used`` is what
    committed calls really used at ``scope`` (the elapsed seconds for ``wall_s``), ``reserved`` what
    calls still in flight hold there, ``requested`` what the refused reservation asked for (0 from
    :meth:`Ledger.exhausted`). :attr:`spent` says which case it is; ``str()`` is the sentence verdicts
    give as their reason.
    """

    limit_name: str
    """The :class:`Budget` field: ``attempts``, ``samples``, ``input_tokens``, ``output_tokens``..."""
    limit: float
    """The limit's value."""
    used: float
    """Committed use at the scope when the limit was checked (elapsed seconds for ``wall_s``)."""
    scope: str
    """``"run"`` or ``"step '<id>'"``."""
    requested: float = 0.0
    """The refused reservation's amount on this limit (0 for :meth:`Ledger.exhausted`)."""
    step_id: str | None = None
    """The step's id, ``None`` for the run."""
    reserved: float = 0.0
    """Held at the scope by other calls' open reservations when this one was refused."""

    @property
    def value(self) -> float:
        """The total the limit was compared with: ``used + reserved + requested``."""
        return self.used + self.reserved + self.requested

    @property
    def spent(self) -> bool:
        """Whether committed use reached the limit; ``False``: the call's estimate did not fit."""
        return self.to_exception().spent

    def to_exception(self) -> BudgetExceeded:
        """This exhaustion as the typed error, for callers that want an exception."""
        return BudgetExceeded(
            limit_name=self.limit_name,
            limit=self.limit,
            value=self.value,
            scope=self.scope,
            used=self.used,
            reserved=self.reserved,
            requested=self.requested,
        )

    def __str__(self) -> str:
        # One wording for the verdict's reason and the exception (``BudgetExceeded`` owns it).
        return str(self.to_exception())


@dataclass(frozen=True, slots=True)
class LedgerSnapshot:
    """A ledger's state for a verdict's evidence; every dict is keyed by :data:`LIMIT_NAMES`."""

    scope: str
    """``"run"`` or ``"step '<id>'"``."""
    used: dict[str, float]
    """Committed totals; ``wall_s`` is the elapsed time."""
    reserved: dict[str, float]
    """Held by reservations not yet committed or released (``wall_s`` is always 0)."""
    limit: dict[str, float | None]
    """The budget, ``None`` where a limit is off."""
    overrun: dict[str, float]
    """What calls used beyond their reservation and was not charged (all 0 when estimates held)."""
    parent: LedgerSnapshot | None = None
    """The run's snapshot, for a step."""
