"""Checking what ``RetryController`` is given: each bad argument is one ``ConfigError`` naming its field
(``groups['arithmetic'][1]``, ``fallback_models[0]``...), raised where the agent is built, not at the
first call inside a run."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool

from retryctl.audit import DecisionLog
from retryctl.exceptions import ConfigError
from retryctl.middleware._estimate import model_key

__all__ = ["check_fallbacks", "check_groups", "check_type", "group_tools", "open_log"]


def check_type(field: str, value: object, kind: type) -> None:
    if value is not None and not isinstance(value, kind):
        want = kind.__name__
        raise ConfigError(field=field, value=value, problem=f"must be a {want}, not {type(value).__name__}")


def open_log(log: DecisionLog | str | os.PathLike[str] | None) -> DecisionLog | None:
    if log is None or isinstance(log, DecisionLog):
        return log
    if isinstance(log, str | os.PathLike):
        return DecisionLog(log)
    raise ConfigError(field="log", value=log, problem="must be a DecisionLog or a path to one")


def check_groups(groups: Mapping[str, Sequence[BaseTool | str]] | None) -> dict[str, list[BaseTool | str]]:
    if groups is None:
        return {}
    if not isinstance(groups, Mapping):
        raise ConfigError(field="groups", value=groups, problem="must map a group name to its tools")
    checked: dict[str, list[BaseTool | str]] = {}
    for name, members in groups.items():
        if isinstance(members, str | BaseTool) or not isinstance(members, Sequence) or not members:
            raise ConfigError(
                field=f"groups[{name!r}]", value=members, problem="must be a non-empty list of tools"
            )
        for i, member in enumerate(members):
            if not isinstance(member, BaseTool | str) or member == "":
                problem = "must be a tool or a tool's name (wrap a function with @tool)"
                raise ConfigError(field=f"groups[{name!r}][{i}]", value=member, problem=problem)
        checked[name] = list(members)
    return checked


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
