"""llama.cpp GBNF helpers: a regular expression as GBNF, and a parse check that needs no model.

:func:`regex_to_gbnf` goes through llama-cpp-python's own converter (``SchemaConverter._visit_pattern``,
what ``json_schema_to_gbnf`` uses for a string's ``pattern``), which wraps the rule in JSON quotes and
copies escapes GBNF does not know (``\\d``, ``\\.``) into its literals, where llama.cpp's parser rejects
them. So the pattern is first rewritten into the subset both speak: shorthand classes spelt out,
escaped punctuation as a one-character class, ``(?:`` as ``(``; then the quotes are stripped from the
rule. What neither can express (anchors inside the pattern, lookarounds, back-references) is a
``ValueError``. :func:`gbnf_problem` asks llama.cpp's own parser, before a grammar it cannot parse
reaches a process that would crash on it (``python -m llama_cpp.server`` 0.3.x segfaults).
"""

from __future__ import annotations

import functools
import importlib
import re

__all__ = ["gbnf_problem", "regex_to_gbnf", "server_gbnf"]

_SHORTHAND = {"d": "0-9", "w": "A-Za-z0-9_", "s": " \\t\\n\\r\\x0B\\x0C"}
_LITERAL_ESCAPES = frozenset("ntr")
"""Escapes GBNF reads as Python does (``\\n``, ``\\t``, ``\\r``); ``\\xHH`` and ``\\uHHHH`` too."""
_QUOTE_OPEN, _QUOTE_CLOSE = '"\\"" ', ' "\\"" space'


def _hex(char: str) -> str:
    return f"\\x{ord(char):02X}" if ord(char) < 256 else f"\\u{ord(char):04X}"


def _escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
    """The rewrite of the escape at ``pattern[i]`` (a backslash) and the index after it."""
    if i + 1 >= len(pattern):
        raise ValueError("the pattern ends with a lone backslash")
    char = pattern[i + 1]
    if char in _SHORTHAND:
        return (_SHORTHAND[char] if in_class else f"[{_SHORTHAND[char]}]"), i + 2
    if char in "DWS":
        if in_class:
            raise ValueError(f"\\{char} inside a character class cannot be expressed in GBNF")
        return f"[^{_SHORTHAND[char.lower()]}]", i + 2
    if char in _LITERAL_ESCAPES or char in "xu" or char == "\\":
        return pattern[i : i + 2], i + 2
    if char.isalnum():
        raise ValueError(f"the escape \\{char} (an anchor or back-reference) cannot be expressed in GBNF")
    if in_class:
        return (f"\\{char}" if char in "[]" else _hex(char)), i + 2
    if char in "[]()|{}*+?":
        return pattern[i : i + 2], i + 2  # the converter reads these as literals
    return f"[{_hex(char)}]", i + 2


def _rewritten(pattern: str) -> str:
    """``pattern`` in the regex subset the converter turns into valid GBNF."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            piece, i = _escape(pattern, i, in_class)
            out.append(piece)
            continue
        if in_class:
            in_class = char != "]" or out[-1] == "["
            out.append(char)
        elif char == "[":
            in_class = True
            out.append(char)
            if pattern.startswith("^", i + 1):
                out.append("^")
                i += 1
        elif char == "(" and pattern.startswith("(?", i):
            if not pattern.startswith("(?:", i):
                raise ValueError("lookarounds, named groups and inline flags cannot be expressed in GBNF")
            out.append("(")
            i += 2
        elif char in "^$":
            raise ValueError(f"the anchor {char!r} inside the pattern cannot be expressed in GBNF")
        else:
            out.append(char)
        i += 1
    if in_class:
        raise ValueError("unbalanced square brackets")
    return "".join(out)


def regex_to_gbnf(regex: str) -> str:
    """A GBNF grammar whose ``root`` admits exactly the strings ``regex`` fully matches (as
    :func:`re.fullmatch` reads it); ``ValueError`` for what it cannot express, ``ModuleNotFoundError``
    without llama-cpp-python (the ``local`` extra)."""
    try:
        re.compile(regex)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from exc
    body = regex[1:] if regex.startswith("^") else regex
    body = body[:-1] if body.endswith("$") and not body.endswith("\\$") else body
    converter_cls = importlib.import_module("llama_cpp.llama_grammar").SchemaConverter
    converter = converter_cls(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    try:
        converter._visit_pattern(f"^{_rewritten(body)}$", "root")
    except AssertionError as exc:  # the converter asserts on what it does not parse
        raise ValueError(str(exc)) from exc
    rules: dict[str, str] = converter._rules
    root = rules["root"]
    if not (root.startswith(_QUOTE_OPEN) and root.endswith(_QUOTE_CLOSE)):
        raise ValueError(f"unexpected converter output: {root!r}")
    rules["root"] = root[len(_QUOTE_OPEN) : -len(_QUOTE_CLOSE)]
    rules.pop("space", None)
    return "\n".join(f"{name} ::= {rule}" for name, rule in sorted(rules.items()))


def gbnf_problem(gbnf: str) -> str | None:
    """Why llama.cpp cannot parse ``gbnf`` (its parser prints the details on stderr), ``None`` when it
    can; ``ModuleNotFoundError`` without llama-cpp-python. No model is needed: the parser takes none."""
    lib = importlib.import_module("llama_cpp")
    sampler = lib.llama_sampler_init_grammar(None, gbnf.encode("utf-8"), b"root")
    if not sampler:
        return "llama.cpp could not parse the GBNF (its parser printed why on stderr)"
    lib.llama_sampler_free(sampler)
    return None


@functools.lru_cache(maxsize=64)
def server_gbnf(gbnf: str | None, regex: str | None) -> str:
    """The GBNF a llama.cpp server is sent for a grammar given as ``gbnf`` or as ``regex`` (converted):
    ``ValueError`` saying why when it cannot be written, or when llama.cpp's parser rejects it. The parse
    check runs where llama-cpp-python is installed; without it a GBNF goes unchecked (and a regex cannot
    be converted). ``python -m llama_cpp.server`` 0.3.x segfaults on a grammar it cannot parse."""
    if gbnf is None:
        try:
            gbnf = regex_to_gbnf(regex or "")
        except ModuleNotFoundError as exc:
            raise ValueError("converting a regex to GBNF needs llama-cpp-python (the local extra)") from exc
    try:
        problem = gbnf_problem(gbnf)
    except ModuleNotFoundError:
        problem = None
    if problem is not None:
        raise ValueError(problem)
    return gbnf
