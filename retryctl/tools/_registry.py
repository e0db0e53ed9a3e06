"""A registry of tools with equivalence groups: which tool to switch to when one fails.

A group (``arithmetic = [calculator, python]``) lists tools that can answer the same questions, in the
order to prefer them. The controller's ``switch`` verdict walks it: :meth:`ToolRegistry.alternatives`
gives the untried, available members after the failed one (wrapping round the group), and
:meth:`ToolRegistry.next_after` the first of them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from langchain_core.tools import BaseTool

from retryctl.exceptions import ConfigError

__all__ = ["ToolRegistry", "default_registry"]


class ToolRegistry:
    """Tools by key (their ``name``) and the equivalence groups between them."""

    def __init__(
        self, tools: Iterable[BaseTool] = (), groups: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        self._tools: dict[str, BaseTool] = {}
        self._groups: dict[str, tuple[str, ...]] = {}
        for tool in tools:
            self.register(tool)
        for name, members in (groups or {}).items():
            self.add_group(name, members)

    def register(self, tool: BaseTool) -> None:
        """Add ``tool`` under its ``name``; a name already taken is a :class:`ConfigError`."""
        if tool.name in self._tools:
            raise ConfigError(field="tools", value=tool.name, problem="a tool with this name exists")
        self._tools[tool.name] = tool

    def add_group(self, name: str, members: Sequence[str]) -> None:
        """Declare the equivalence group ``name``: registered tool keys, most preferred first."""
        if not name or name in self._groups:
            raise ConfigError(field="groups", value=name, problem="group names must be new and non-empty")
        unknown = [m for m in members if m not in self._tools]
        if unknown:
            raise ConfigError(
                field=f"groups[{name!r}]", value=unknown, problem=f"unknown tools; known: {self.keys()}"
            )
        if len(set(members)) != len(members) or len(members) < 2:
            raise ConfigError(
                field=f"groups[{name!r}]", value=list(members), problem="needs 2+ distinct tools"
            )
        self._groups[name] = tuple(members)

    def keys(self) -> list[str]:
        """Every tool key, in registration order."""
        return list(self._tools)

    def tools(self) -> list[BaseTool]:
        """Every tool, in registration order (e.g. to bind to a chat model)."""
        return list(self._tools.values())

    def get(self, key: str) -> BaseTool:
        """The tool registered as ``key``."""
        try:
            return self._tools[key]
        except KeyError:
            raise ConfigError(field="key", value=key, problem=f"unknown tool; known: {self.keys()}") from None

    def group(self, name: str) -> tuple[str, ...]:
        """The members of group ``name``."""
        try:
            return self._groups[name]
        except KeyError:
            raise ConfigError(
                field="group", value=name, problem=f"unknown group; known: {list(self._groups)}"
            ) from None

    def groups_of(self, key: str) -> list[str]:
        """The groups ``key`` belongs to."""
        return [name for name, members in self._groups.items() if key in members]

    def alternatives(
        self,
        key: str,
        *,
        unavailable: Collection[str] = (),
        tried: Collection[str] = (),
        group: str | None = None,
    ) -> tuple[str, ...]:
        """The members of ``key``'s group to try instead of it, in order: those after ``key``, then
        (wrapping round) those before it, skipping ``key``, ``unavailable`` (e.g. breaker open) and
        ``tried``. Empty when ``key`` is in no group. A key in several groups needs ``group``."""
        self.get(key)
        if group is None:
            names = self.groups_of(key)
            if not names:
                return ()
            if len(names) > 1:
                raise ConfigError(
                    field="group", value=None, problem=f"{key!r} is in groups {names}: name one"
                )
            group = names[0]
        members = self.group(group)
        if key not in members:
            raise ConfigError(field="group", value=group, problem=f"{key!r} is not a member")
        start = members.index(key)
        order = members[start + 1 :] + members[:start]
        skip = set(unavailable) | set(tried)
        return tuple(m for m in order if m not in skip)

    def next_after(
        self,
        key: str,
        *,
        unavailable: Collection[str] = (),
        tried: Collection[str] = (),
        group: str | None = None,
    ) -> str | None:
        """The first of :meth:`alternatives`, or ``None`` when nothing is left to switch to."""
        found = self.alternatives(key, unavailable=unavailable, tried=tried, group=group)
        return found[0] if found else None


def default_registry(*, python: BaseTool | None = None) -> ToolRegistry:
    """``calculator`` and ``python`` in the group ``arithmetic`` (calculator preferred: exact and
    instant). Pass a configured :class:`~retryctl.tools.PythonTool` (e.g. on a warm Sandbox)."""
    from retryctl.tools._calculator import CalculatorTool
    from retryctl.tools._python import PythonTool

    return ToolRegistry(
        [CalculatorTool(), python or PythonTool()], groups={"arithmetic": ["calculator", "python"]}
    )
