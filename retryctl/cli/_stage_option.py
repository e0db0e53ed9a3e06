"""``--stage NAME:key=value,...``: one stage of a staged sample, from the command line.

``record`` and ``sweep`` take it, once per stage in the order they run::

    --stage think:temperature=0.3,top_p=0.9,top_k=40,min_p=0.05,max_tokens=160,start=<think>,end=</think>
    --stage answer:max_tokens=16

Keys: ``temperature``, ``top_p``, ``top_k``, ``min_p``, ``max_tokens`` (the command's ``--max-tokens``
when not given), ``start`` and ``end`` (given again for each further end string). A knob not given takes
the draw's value, as :class:`~retryctl.models.Stage` says. In ``start`` and ``end``, ``\\n`` is a newline,
``\\t`` a tab, ``\\,`` a comma and ``\\\\`` a backslash (a comma alone separates keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from retryctl.exceptions import ConfigError
from retryctl.models import Stage

if TYPE_CHECKING:
    from retryctl.models._openai_stages import PromptRenderer

__all__ = [
    "STAGE_KEYS",
    "STAGE_MODES",
    "ChatTemplateOption",
    "StageModeOption",
    "StageOption",
    "parse_stage",
    "parse_stages",
    "stage_error",
    "stage_mode_problem",
    "stage_renderer",
]

STAGE_KEYS = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "start", "end")
"""The keys a ``--stage`` spec takes."""

STAGE_MODES = ("continue", "completions")
"""``--stage-mode``'s values (``OpenAIBackend``'s ``stage_mode``; the ``openai`` extra is imported only
to use one)."""

_FLOATS = ("temperature", "top_p", "min_p")
_INTS = ("top_k", "max_tokens")
_ESCAPES = {"n": "\n", "t": "\t", ",": ",", "\\": "\\"}

StageOption = Annotated[
    list[str] | None,
    typer.Option(
        "--stage",
        metavar="NAME:KEY=VALUE,...",
        help="A stage of each sample, once per stage in order, e.g. think:temperature=0.3, "
        "max_tokens=160, end=</think> (no spaces); keys: temperature, top_p, top_k, min_p, max_tokens, "
        "start, end (docs/stopping.md).",
    ),
]


def _bad(spec: str, problem: str) -> ConfigError:
    return ConfigError(field="--stage", value=spec, problem=problem)


def stage_error(exc: ConfigError) -> str:
    """The one line a command prints for a spec :func:`parse_stages` refused."""
    return f"--stage {exc.value!r}: {exc.problem}"


def _split(body: str, spec: str) -> list[str]:
    """The spec's ``key=value`` items: split at commas that are not escaped, escapes decoded."""
    items: list[str] = []
    part: list[str] = []
    chars = iter(body)
    for char in chars:
        if char == "\\":
            following = next(chars, "")
            if following not in _ESCAPES:
                raise _bad(spec, f"unknown escape '\\{following}' (\\n, \\t, \\, and \\\\ are read)")
            part.append(_ESCAPES[following])
        elif char == ",":
            items.append("".join(part))
            part = []
        else:
            part.append(char)
    items.append("".join(part))
    return items


def parse_stage(spec: str, *, max_tokens: int) -> Stage:
    """One ``--stage`` spec as a :class:`Stage`; ``max_tokens`` is its cap when the spec gives none.

    Raises :class:`~retryctl.exceptions.ConfigError` (``field="--stage"``, ``value`` the spec) whose
    problem names the key at fault.
    """
    name, _, body = spec.partition(":")
    name = name.strip()
    if not name:
        raise _bad(spec, "give the stage's name first (think:temperature=0.3,...)")
    fields: dict[str, Any] = {"name": name, "max_tokens": max_tokens}
    ends: list[str] = []
    given: set[str] = set()
    for item in _split(body, spec) if body else []:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            raise _bad(spec, f"{item!r} is not key=value")
        if key not in STAGE_KEYS:
            raise _bad(spec, f"unknown key {key!r} (one of {', '.join(STAGE_KEYS)})")
        if key in given and key != "end":
            raise _bad(spec, f"key {key!r} given twice")
        given.add(key)
        if key == "end":
            if not value:
                raise _bad(spec, "end= needs a string (the text that ends the stage)")
            ends.append(value)
        elif key == "start":
            fields["start"] = value
        else:
            fields[key] = _number(spec, key, value.strip())
    fields["end"] = tuple(ends)
    try:
        return Stage(**fields)
    except ConfigError as exc:
        knob = exc.field.rsplit(".", 1)[-1]
        raise _bad(spec, f"{knob}={exc.value!r} {exc.problem}") from None


def _number(spec: str, key: str, value: str) -> float | int:
    try:
        return int(value) if key in _INTS else float(value)
    except ValueError:
        kind = "a whole number" if key in _INTS else "a number"
        raise _bad(spec, f"{key}={value!r} is not {kind}") from None


def parse_stages(specs: Sequence[str] | None, *, max_tokens: int) -> tuple[Stage, ...]:
    """Every ``--stage`` in order (``()`` when none was given); two stages of one name are refused."""
    stages = tuple(parse_stage(spec, max_tokens=max_tokens) for spec in specs or ())
    seen: set[str] = set()
    for spec, stage in zip(specs or (), stages, strict=True):
        if stage.name in seen:
            raise _bad(spec, f"a second stage named {stage.name!r} (each stage needs its own name)")
        seen.add(stage.name)
    return stages


StageModeOption = Annotated[
    str | None,
    typer.Option(
        "--stage-mode",
        metavar="continue|completions",
        help="With --stage and --base-url: how the server continues a stage. 'continue': the chat "
        "endpoint continues a final assistant message (vLLM, SGLang, llama.cpp's llama-server); "
        "'completions': the completions endpoint, the prompt rendered with --chat-template-gguf "
        "(llama-cpp-python's llama_cpp.server).",
    ),
]
ChatTemplateOption = Annotated[
    Path | None,
    typer.Option(
        "--chat-template-gguf",
        metavar="MODEL.gguf",
        help="With --stage-mode completions: the GGUF file the server serves; its chat template "
        "renders the prompt (read without the weights; needs the 'local' extra).",
    ),
]


def stage_mode_problem(
    *, staged: bool, base_url: str | None, mode: str | None, template: Path | None
) -> str | None:
    """What is wrong with ``--stage-mode``/``--chat-template-gguf`` for this command line, as the
    one line a command prints (``None``: nothing)."""
    if mode is not None and mode not in STAGE_MODES:
        return f"--stage-mode {mode!r}: must be one of {', '.join(STAGE_MODES)}"
    if mode is not None and base_url is None:
        return "--stage-mode: only with --base-url (the embedded model continues its stages itself)"
    if staged and base_url is not None and mode is None:
        return (
            "--stage with --base-url needs --stage-mode: 'continue' (vLLM, SGLang, llama.cpp's "
            "llama-server) or 'completions' with --chat-template-gguf (llama-cpp-python's llama_cpp.server)"
        )
    if mode == "completions" and template is None:
        return "--stage-mode completions needs --chat-template-gguf MODEL.gguf (the file the server serves)"
    if template is not None and mode != "completions":
        return "--chat-template-gguf: only with --stage-mode completions"
    if template is not None and not template.is_file():
        return f"--chat-template-gguf {template}: no such file"
    return None


def stage_renderer(mode: str | None, template: Path | None) -> PromptRenderer | None:
    """The prompt renderer ``--stage-mode completions`` sends with (``None`` for the other modes)."""
    if mode != "completions" or template is None:
        return None
    from retryctl.models._openai_stages import gguf_renderer

    return gguf_renderer(template)
