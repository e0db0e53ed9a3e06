"""How an OpenAI-compatible request carries ``SamplingParams.grammar``, server dialect by server dialect.

No field for a grammar is in OpenAI's API, and each server that takes one names it its own way:

=================  ==========================  ==================================  ===================
dialect            GBNF                        regex                               JSON schema
=================  ==========================  ==================================  ===================
``llama.cpp``      ``grammar``                 ``grammar`` (converted to GBNF)     ``response_format``
``vllm``           ``structured_outputs``      ``structured_outputs``              ``response_format``
                   ``{"grammar": ...}``        ``{"regex": ...}``
``vllm-guided``    ``guided_grammar``          ``guided_regex``                    ``response_format``
``sglang``         ``ebnf``                    ``regex``                           ``response_format``
=================  ==========================  ==================================  ===================

``auto`` uses llama.cpp's names (``llama-server`` and ``python -m llama_cpp.server`` both read
``grammar`` on chat completions); ``vllm-guided`` is vLLM before 0.12, which removed the ``guided_*``
fields. A JSON-schema grammar goes as a ``json_schema`` response format, down the same ladder as any
structured request (:mod:`._openai_modes`). A server that refuses the grammar's field (a capability
error naming it) is remembered in its :class:`~._openai_caps.ServerCapabilities` under that field's
name, and the request goes on at once without the grammar: one extra request per server, ever. A
candidate's ``grammar`` names the grammar only when the request carried it and the server did not
refuse it; otherwise its notes say why, and the check judges the output after decoding, as it always
does. A regex is also checked here (:func:`re.fullmatch`): a server that ignored the field silently
is caught, and said so.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from retryctl._log import get_logger
from retryctl.exceptions import ConfigError
from retryctl.models._gbnf import server_gbnf
from retryctl.models._grammar import Grammar
from retryctl.models._types import Candidate, SamplingParams

__all__ = [
    "GRAMMAR_FIELDS",
    "GrammarDialect",
    "GrammarPlan",
    "check_dialect",
    "grammar_plan",
    "refused_field",
]

GrammarDialect = Literal["auto", "llama.cpp", "vllm", "vllm-guided", "sglang"]
"""The request fields a server reads a grammar from (see the module's table); ``None`` sends no grammar
field (a JSON-schema grammar still goes as a response format, which is OpenAI's own API)."""

_DIALECTS: tuple[str, ...] = ("auto", "llama.cpp", "vllm", "vllm-guided", "sglang")
_FIELD: dict[str, dict[str, str]] = {
    "llama.cpp": {"gbnf": "grammar", "regex": "grammar"},
    "vllm": {"gbnf": "structured_outputs", "regex": "structured_outputs"},
    "vllm-guided": {"gbnf": "guided_grammar", "regex": "guided_regex"},
    "sglang": {"gbnf": "ebnf", "regex": "regex"},
}
GRAMMAR_FIELDS = frozenset(name for fields in _FIELD.values() for name in fields.values())
"""Every top-level request field a grammar may travel in: what a refusal of one of them names."""
_STRICT_MODES = frozenset({"json_schema", "json_object+schema"})
"""Ladder rungs where the server holds the reply to the schema itself."""
_CUT = frozenset({"length", "cut"})

_log = get_logger("retryctl.models")


def check_dialect(value: object) -> GrammarDialect | None:
    """``value`` as a dialect; :class:`ConfigError` naming ``grammar_dialect`` otherwise."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in _DIALECTS:
        raise ConfigError(
            field="grammar_dialect", value=value, problem=f"must be one of {', '.join(_DIALECTS)} or None"
        )
    return value  # type: ignore[return-value]  # checked against _DIALECTS just above


def _fields(grammar: Grammar, dialect: str) -> dict[str, Any]:
    """The payload fields that carry a GBNF or regex ``grammar``; ``ValueError`` when they cannot."""
    name = _FIELD[dialect][grammar.kind]
    text = grammar.gbnf if grammar.gbnf is not None else grammar.regex
    assert text is not None
    if dialect == "llama.cpp":
        text = server_gbnf(grammar.gbnf, grammar.regex)
    if dialect == "vllm":
        return {name: {"grammar" if grammar.gbnf is not None else "regex": text}}
    return {name: text}


def _schema_format(grammar: Grammar) -> dict[str, Any]:
    # OpenAI's format names take letters, digits, '_' and '-' only.
    name = re.sub(r"[^A-Za-z0-9_-]", "_", grammar.name)[:64]
    return {"type": "json_schema", "json_schema": {"name": name, "schema": dict(grammar.json_schema or {})}}


@dataclass(frozen=True)
class GrammarPlan:
    """How one request carries its grammar, if at all, and what its candidates then say."""

    grammar: Grammar | None
    """The grammar asked for, if any."""
    params: SamplingParams
    """What the request is built from: the grammar taken out, the structure it replaces removed."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Payload fields that carry a GBNF or regex grammar (empty when it is not sent that way)."""
    unsent: str | None = None
    """Why the grammar is not sent, when it is not (for the candidates' notes)."""

    @property
    def by_format(self) -> bool:
        """Whether a JSON-schema grammar rides the ``response_format`` ladder."""
        return self.grammar is not None and self.grammar.json_schema is not None and self.unsent is None

    def apply(self, payload: dict[str, Any], extra_body: Collection[str]) -> dict[str, Any]:
        """``payload`` with the grammar's fields, unless the backend's ``extra_body`` sets them itself."""
        payload.update({k: v for k, v in self.fields.items() if k not in extra_body})
        return payload

    def finish(self, candidate: Candidate, mode: str) -> Candidate:
        """The candidate as the grammar served it: ``grammar`` set only when the server decoded under
        it, notes saying otherwise. ``mode`` is the structured-output rung the request went on."""
        grammar = self.grammar
        if grammar is None:
            return candidate
        name = grammar.name
        if self.unsent is not None:
            return _noted(candidate, self.unsent)
        if self.by_format and mode not in _STRICT_MODES:
            return _noted(candidate, f"grammar {name!r} not honoured by the server: checked after decoding")
        sent = replace(candidate, grammar=name)
        note = f"decoded under grammar {name!r} (strictness {grammar.strictness:.2f}) by the server"
        if grammar.regex is None or _full_match(grammar.regex, candidate.text):
            return _noted(sent, note)
        if candidate.finish_reason in _CUT:
            return _noted(sent, f"{note}; stopped ({candidate.finish_reason}) before the regex was complete")
        _log.warning("grammar.ignored", grammar=name, model=candidate.model)
        return _noted(
            candidate,
            f"grammar {name!r} sent but its regex does not match the output: the server seems to ignore "
            "it; checked after decoding",
        )


def _full_match(regex: str, text: str) -> bool:
    try:
        return re.fullmatch(regex, text) is not None
    except re.error:
        return False


def _noted(candidate: Candidate, note: str) -> Candidate:
    return replace(candidate, notes=(*candidate.notes, note))


def grammar_plan(
    params: SamplingParams, dialect: GrammarDialect | None, refused: Collection[str]
) -> GrammarPlan:
    """How a request of ``params`` carries its grammar to a server of ``dialect`` that is known to
    refuse the features ``refused``. Without a grammar, ``params`` as they are."""
    grammar = params.grammar
    if grammar is None:
        return GrammarPlan(grammar=None, params=params)
    plain = replace(params, grammar=None)
    name = grammar.name
    if params.tools:
        why = "not sent with tools (tool calls carry their own structure)"
        return GrammarPlan(grammar, plain, unsent=f"grammar {name!r} {why}: checked after decoding")
    if grammar.json_schema is not None:
        return GrammarPlan(grammar, replace(plain, response_format=_schema_format(grammar)))
    if dialect is None:
        why = "not sent (grammar_dialect=None)"
        return GrammarPlan(grammar, plain, unsent=f"grammar {name!r} {why}: checked after decoding")
    wire = "llama.cpp" if dialect == "auto" else dialect
    if _FIELD[wire][grammar.kind] in refused:
        why = "not honoured by the server"
        return GrammarPlan(grammar, plain, unsent=f"grammar {name!r} {why}: checked after decoding")
    try:
        fields = _fields(grammar, wire)
    except ValueError as exc:
        why = f"({grammar.kind}) cannot be sent to a {wire} server: {exc}"
        return GrammarPlan(grammar, plain, unsent=f"grammar {name!r} {why}; checked after decoding")
    # A grammar replaces the response format's own constraint while it is in force (SamplingParams).
    return GrammarPlan(grammar, replace(plain, response_format=None), fields=fields)


def refused_field(parameter: str, payload: dict[str, Any]) -> str | None:
    """The grammar field a refusal of ``parameter`` names, if the request carried it: the feature to
    remember, so the server is not sent a grammar that way again."""
    return parameter if parameter in GRAMMAR_FIELDS and parameter in payload else None
