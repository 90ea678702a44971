"""The process that runs math-verify for :mod:`claw_envs.toolcall.signals` (``python -m`` this module).

It reads one JSON request a line, ``{"gold": str, "pred": str, "timeout": int}``, and answers one JSON line,
``{"equal": bool}`` or ``{"error": str}``. math-verify's own ``signal.alarm`` time limits work here because
requests are handled on this process's main thread; the parent also kills the process if it overruns.
"""

from __future__ import annotations

import json
import logging
import sys


def _as_math(text: str) -> str:
    return text if "$" in text or "\\boxed" in text else f"${text}$"


def main() -> None:
    """Say ready, then answer each request line on stdin with one JSON line on stdout until stdin ends."""
    logging.disable(logging.WARNING)
    from math_verify import parse, verify

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            req = json.loads(line)
            limit = max(1, int(req.get("timeout", 5)))
            gold = parse(_as_math(req["gold"]), parsing_timeout=limit)
            pred = parse(_as_math(req["pred"]), parsing_timeout=limit)
            reply = {"equal": bool(gold and pred and verify(gold, pred, timeout_seconds=limit))}
        except Exception as err:  # one bad request must not end the worker
            reply = {"error": f"{type(err).__name__}: {err}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
