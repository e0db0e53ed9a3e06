"""Checking what ``RetryController`` is given: each bad argument is one ``ConfigError`` naming its field
(``groups['arithmetic'][1]``, ``fallback_models[0]``...), raised where the agent is built, not at the
first call inside a run. The arguments every driver shares are checked by ``retryctl.nodes._arguments``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from pydantic import ConfigDict

from retryctl.controller import Breaker, BreakerConfig, Policy
from retryctl.exceptions import ConfigError
from retryctl.middleware._estimate import model_key
from retryctl.nodes._arguments import DriverArguments, instance_of

__all__ = ["MiddlewareArguments", "check_fallbacks", "group_tools"]


class MiddlewareArguments(DriverArguments):
    """The shared arguments (:class:`~retryctl.nodes._arguments.DriverArguments`) and the middleware's own."""

    model_config = ConfigDict(protected_namespaces=())

    model_policy: Annotated[Policy | None, instance_of(Policy)] = None
    model_breaker: Annotated[Breaker | BreakerConfig | None, instance_of(Breaker, BreakerConfig)] = None


def group_tools(groups: Mapping[str, Sequence[BaseTool | str]]) -> list[BaseTool]:
    tools: dict[str, BaseTool] = {}
    for name, members in groups.items():
        for member in members:
            if isinstance(member, BaseTool):
                other = tools.setdefault(member.name, member)
                if other is not member:
                    raise ConfigError(
                        field=f"groups[{name!r}]",
                        value=member.name,
                        problem="two different tools have this name",
                    )
    return list(tools.values())


def check_fallbacks(models: Sequence[BaseChatModel | str]) -> dict[str, BaseChatModel]:
    if isinstance(models, str | BaseChatModel):
        models = [models]
    found: dict[str, BaseChatModel] = {}
    for i, given in enumerate(models):
        model = given
        if isinstance(given, str):
            from langchain.chat_models import init_chat_model

            try:
                model = init_chat_model(given)
            except Exception as exc:
                raise ConfigError(field=f"fallback_models[{i}]", value=given, problem=str(exc)) from exc
        if not isinstance(model, BaseChatModel):
            problem = "must be a chat model or a 'provider:model' string"
            raise ConfigError(field=f"fallback_models[{i}]", value=model, problem=problem)
        key, n = model_key(model), 2
        name = key
        while name in found:
            name, n = f"{key}#{n}", n + 1
        found[name] = model
    return found
