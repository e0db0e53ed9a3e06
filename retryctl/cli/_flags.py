"""Help that shows a flag as a flag: ``--json``, not ``--json <bool>``.

typer 0.29 on click 8.5 prints every boolean option's type, ``<bool>``, in the rich help (even ``--help``'s
own), which reads as if the flag took a value; ``--json true`` is then refused ("unexpected extra
argument"), as for any flag. Tools people know (git, pip, curl) show a flag bare, so the command line's
commands and its root group give every flag an empty metavar when their parameters are listed. The
option still parses as before: click never reads a flag's metavar to parse it.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand, TyperGroup

from retryctl.cli._ray_option import RAY, bare_ray

__all__ = ["FlagCommand", "FlagGroup"]


def _bare(params: list[Any]) -> list[Any]:
    # typer vendors its click (typer._click): its options are recognised by their attributes.
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class FlagCommand(TyperCommand):
    """A typer command whose help lists flags without a value type."""

    def get_params(self, ctx: Any) -> list[Any]:
        """The command's parameters, flags given an empty metavar."""
        return _bare(super().get_params(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Parse ``args``; in a command with ``--ray``, a bare ``--ray`` is ``--ray=local`` (the
        vendored click has no option of an optional value: see ``_ray_option``)."""
        if any(RAY in getattr(param, "opts", ()) for param in self.params):
            args = bare_ray(args)
        return super().parse_args(ctx, args)


class FlagGroup(TyperGroup):
    """The root group, likewise (its ``--help``)."""

    def get_params(self, ctx: Any) -> list[Any]:
        """The group's parameters, flags given an empty metavar."""
        return _bare(super().get_params(ctx))
