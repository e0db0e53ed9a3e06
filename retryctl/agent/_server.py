"""The demo agent as LangGraph's server tooling loads it: ``langgraph.json`` names :data:`graph`.

The server (``langgraph dev``, ``langgraph up``) imports this module once and runs :data:`graph` with its
own checkpointer, which it puts in place of ours: the graph is built interactive, so ``ask_user`` pauses
a run with ``interrupt()`` and a client resumes the thread with ``Command(resume=reply)``. Outside such a
server, build your own with :func:`~retryctl.agent.build_demo_graph`.

The model is the embedded one unless ``RETRYCTL_BASE_URL`` and ``RETRYCTL_MODEL_NAME`` name an
OpenAI-compatible server (set them in the shell, or in ``langgraph.json``'s ``env``).
"""

from __future__ import annotations

import os

from langgraph.graph.state import CompiledStateGraph

from retryctl.agent._graph import DemoState, build_demo_graph
from retryctl.models import EmbeddedBackend, ModelBackend, find_smollm2_gguf

__all__ = ["graph", "server_graph"]


def _model(base_url: str | None) -> ModelBackend | None:
    if base_url:
        return None
    # The model file is found now: the server imports this module off its event loop, but runs nodes on
    # it, and `langgraph dev` refuses a file-system search there.
    return EmbeddedBackend(model_path=find_smollm2_gguf(), n_ctx=1024)


def server_graph() -> CompiledStateGraph[DemoState, None, DemoState, DemoState]:
    """The demo graph for a LangGraph server, configured from the environment."""
    base_url = os.environ.get("RETRYCTL_BASE_URL") or None
    return build_demo_graph(
        base_url=base_url,
        model_name=os.environ.get("RETRYCTL_MODEL_NAME") or None,
        model=_model(base_url),
        interactive=True,
        # True: "a checkpointer is lent to this graph". The server lends its own; invoked without one,
        # LangGraph refuses to run rather than lose a pause.
        checkpointer=True,
    )


graph = server_graph()
"""What ``langgraph.json`` names."""
