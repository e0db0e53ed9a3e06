"""Model backends behind one small protocol: OpenAI-compatible servers, an embedded llama.cpp model,
LangChain chat models, sample-bank replay, and a scripted backend for tests.

Every backend answers ``await backend.sample(messages, params, k=k) -> list[Candidate]`` (and
``backend.sample_sync(...)``), and every failure is a :class:`BackendError` that says whether retrying
can help.

Each name is imported from its module on first use (``retryctl._lazy``): the drivers import
``Candidate`` or ``SamplingParams`` from here, and :class:`OpenAIBackend` needs ``openai`` (the
``openai`` extra), which an agent that never calls it should not load: when this module imported every
backend, ``openai`` (and the ``aiohttp`` it picks up) made ``import retryctl.middleware`` take 1.55 times
as long as ``import langchain.agents`` alone, where it takes 1.09 times (``bench/install_footprint.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retryctl._lazy import lazy_exports

if TYPE_CHECKING:
    from retryctl.models._base import (
        BackendBase,
        ModelBackend,
        sample_blocking,
    )
    from retryctl.models._build_check import BuildCheck, check_embedded_build
    from retryctl.models._constrained import ConstrainedBackend
    from retryctl.models._constraints import ConstraintPolicy
    from retryctl.models._embedded import EmbeddedBackend
    from retryctl.models._errors import (
        BackendError,
        BackendTimeout,
        BackendUnavailable,
        MalformedResponse,
        RepeatedFault,
        ReplayExhausted,
        ServerFault,
        TerminalBackendError,
        TransientBackendError,
        UnsupportedParameter,
    )
    from retryctl.models._grammar import Grammar, GrammarKind, rung_for
    from retryctl.models._langchain import (
        LangChainBackend,
        ParamsToKwargs,
        llama_cpp_style_kwargs,
        openai_style_kwargs,
        stop_only_kwargs,
    )
    from retryctl.models._local import find_smollm2_gguf
    from retryctl.models._messages import Message, MessagesLike, normalise_messages
    from retryctl.models._openai import NMode, OpenAIBackend
    from retryctl.models._openai_caps import CapabilityRegistry, ServerCapabilities
    from retryctl.models._openai_grammar import GrammarDialect
    from retryctl.models._replay import ReplayBackend, random_order
    from retryctl.models._retry import RetrySettings
    from retryctl.models._scripted import ScriptedBackend, ScriptedCall, ScriptItem
    from retryctl.models._stages import Stage, StageOutcome
    from retryctl.models._types import (
        Candidate,
        Constraint,
        SamplingParams,
        TokenLogprob,
        ToolCall,
        ToolSpec,
        Usage,
    )

__all__ = [
    "BackendBase",
    "BackendError",
    "BackendTimeout",
    "BackendUnavailable",
    "BuildCheck",
    "Candidate",
    "CapabilityRegistry",
    "ConstrainedBackend",
    "Constraint",
    "ConstraintPolicy",
    "EmbeddedBackend",
    "Grammar",
    "GrammarDialect",
    "GrammarKind",
    "LangChainBackend",
    "MalformedResponse",
    "Message",
    "MessagesLike",
    "ModelBackend",
    "NMode",
    "OpenAIBackend",
    "ParamsToKwargs",
    "RepeatedFault",
    "ReplayBackend",
    "ReplayExhausted",
    "RetrySettings",
    "SamplingParams",
    "ScriptItem",
    "ScriptedBackend",
    "ScriptedCall",
    "ServerCapabilities",
    "ServerFault",
    "Stage",
    "StageOutcome",
    "TerminalBackendError",
    "TokenLogprob",
    "ToolCall",
    "ToolSpec",
    "TransientBackendError",
    "UnsupportedParameter",
    "Usage",
    "check_embedded_build",
    "find_smollm2_gguf",
    "llama_cpp_style_kwargs",
    "normalise_messages",
    "openai_style_kwargs",
    "random_order",
    "rung_for",
    "sample_blocking",
    "stop_only_kwargs",
]

_MODULES = {
    **dict.fromkeys(("BackendBase", "ModelBackend", "sample_blocking"), "_base"),
    **dict.fromkeys(("BuildCheck", "check_embedded_build"), "_build_check"),
    "ConstrainedBackend": "_constrained",
    "ConstraintPolicy": "_constraints",
    "EmbeddedBackend": "_embedded",
    **dict.fromkeys(("Grammar", "GrammarKind", "rung_for"), "_grammar"),
    **dict.fromkeys(
        (
            "BackendError",
            "BackendTimeout",
            "BackendUnavailable",
            "MalformedResponse",
            "RepeatedFault",
            "ReplayExhausted",
            "ServerFault",
            "TerminalBackendError",
            "TransientBackendError",
            "UnsupportedParameter",
        ),
        "_errors",
    ),
    **dict.fromkeys(
        (
            "LangChainBackend",
            "ParamsToKwargs",
            "llama_cpp_style_kwargs",
            "openai_style_kwargs",
            "stop_only_kwargs",
        ),
        "_langchain",
    ),
    "find_smollm2_gguf": "_local",
    **dict.fromkeys(("Message", "MessagesLike", "normalise_messages"), "_messages"),
    **dict.fromkeys(("NMode", "OpenAIBackend"), "_openai"),
    **dict.fromkeys(("CapabilityRegistry", "ServerCapabilities"), "_openai_caps"),
    "GrammarDialect": "_openai_grammar",
    **dict.fromkeys(("ReplayBackend", "random_order"), "_replay"),
    "RetrySettings": "_retry",
    **dict.fromkeys(("ScriptedBackend", "ScriptedCall", "ScriptItem"), "_scripted"),
    **dict.fromkeys(("Stage", "StageOutcome"), "_stages"),
    **dict.fromkeys(
        (
            "Candidate",
            "Constraint",
            "SamplingParams",
            "TokenLogprob",
            "ToolCall",
            "ToolSpec",
            "Usage",
        ),
        "_types",
    ),
}
__getattr__, __dir__ = lazy_exports(globals(), _MODULES)
