"""How this process ends, for the commands that care.

:func:`retryctl.cli.main` runs some commands (``audit``) in a process that exits without freeing its
heap, as mypy does (``mypy.util.hard_exit``); it sets :data:`HEAP` to a list for them, and a command
that built a large structure puts it there instead of freeing it on the way out (a tenth of a second
or more for a million-record audit). Called in-process (tests, embedding), :data:`HEAP` is ``None``
and everything is freed as usual.
"""

from __future__ import annotations

HEAP: list[object] | None = None
"""Where large objects go when the process will exit without freeing them; ``None`` otherwise."""
