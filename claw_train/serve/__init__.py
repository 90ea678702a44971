"""``claw-serve``: an OpenAI-compatible ``/v1/chat/completions`` server that learns from live conversations.

::

    client ──POST /v1/chat/completions──► LiveSessions ──generate (token-exact)──► policy
                 X-Session-Id, X-Turn-Type     │  the session's next main request = the last turn's next state
                                               └──turns──► judge workers ──samples──► trainer ──weights──┘

Composed from parts: the wire format (:mod:`~claw_train.serve.schema`, pure), the live sessions — a turn source of
the same :class:`~claw_train.pipeline.Pipeline` that ``claw-train`` runs (:mod:`~claw_train.serve.sessions`) —
the HTTP routes (:mod:`~claw_train.serve.app`) and the wiring that runs them with the pipeline
(:mod:`~claw_train.serve.server`). Serving never waits on judging or training.
"""

from claw_train.serve.app import create_app
from claw_train.serve.schema import ApiError, ChatRequest, chat_response, parse_request, sse_events
from claw_train.serve.server import serve, serve_pipeline
from claw_train.serve.sessions import LiveSessions, continues

__all__ = [
    "ApiError",
    "ChatRequest",
    "LiveSessions",
    "chat_response",
    "continues",
    "create_app",
    "parse_request",
    "serve",
    "serve_pipeline",
    "sse_events",
]
