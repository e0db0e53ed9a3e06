"""Decoding constraints a check can state: a GBNF grammar, a JSON schema (with patterns) or a regex.

A :class:`Grammar` is a *filter* on what a backend lets the model write, never a proof that the text
is right: the check it came from still runs on the output. A check that can relax hands out a
*ladder* of grammars, narrowest first, each with the least strictness of the relaxation schedule at
which it is still used (:func:`rung_for`); the policy's schedule lowers the strictness on each failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from retryctl.exceptions import ConfigError

__all__ = ["Grammar", "GrammarKind", "rung_for"]

GrammarKind = Literal["gbnf", "json_schema", "regex"]
"""How a grammar is written: llama.cpp's GBNF, a JSON schema, or a regular expression."""


@dataclass(frozen=True, kw_only=True)
class Grammar:
    """One decoding constraint. Exactly one of ``gbnf``, ``json_schema`` and ``regex`` is set."""

    name: str
    """What logs and verdicts call it (``"permutations"``, ``"numbers"``...)."""
    gbnf: str | None = None
    """A GBNF grammar (llama.cpp's dialect; its ``root`` rule is the whole output)."""
    json_schema: Mapping[str, Any] | None = None
    """A JSON schema the output must be an instance of (``pattern`` keywords included)."""
    regex: str | None = None
    """A regular expression the whole output must match."""
    strictness: float = 1.0
    """The least strictness (of the policy's relaxation schedule, in (0, 1]) at which this rung is
    used; a ladder's rungs go from narrow (1.0) to wide (lower)."""
    description: str = ""
    """What it admits, in words, for verdicts and the demo (``"the question's numbers, each as often
    as given, joined by + - * /"``)."""

    def __post_init__(self) -> None:
        given = [k for k in ("gbnf", "json_schema", "regex") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ConfigError(
                field="grammar", value=given or None, problem="give exactly one of gbnf, json_schema, regex"
            )
        if not self.name:
            raise ConfigError(field="grammar.name", value=self.name, problem="must be a non-empty name")
        if not (0.0 < self.strictness <= 1.0):
            raise ConfigError(field="grammar.strictness", value=self.strictness, problem="must be in (0, 1]")
        if self.json_schema is not None and not isinstance(self.json_schema, Mapping):
            raise ConfigError(field="grammar.json_schema", value=self.json_schema, problem="must be a dict")

    @property
    def kind(self) -> GrammarKind:
        """Which form it is written in."""
        if self.gbnf is not None:
            return "gbnf"
        return "json_schema" if self.json_schema is not None else "regex"

    def summary(self) -> dict[str, Any]:
        """What a record says of it: name, kind, strictness and description."""
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "strictness": round(self.strictness, 4)}
        if self.description:
            out["description"] = self.description
        return out


def rung_for(ladder: Sequence[Grammar], strictness: float) -> Grammar | None:
    """The narrowest rung of ``ladder`` still used at ``strictness``: the first whose own strictness is
    at most it. ``None`` when every rung needs more (the output is then checked after decoding only)."""
    return next((g for g in ladder if g.strictness <= strictness + 1e-9), None)
