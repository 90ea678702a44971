"""Tool calls in a model's raw text, for every family that offers tools: :mod:`.parse` reads Qwen/Hermes
``<tool_call>`` blocks and OpenAI ``tool_calls`` messages (bounded, never raising), and :mod:`.schema` checks a
call's arguments against its tool's JSON schema.

The terminal and SWE families read their ``bash`` calls with it (through :mod:`claw_envs.shell_turns`), the GUI
family its computer-use calls, the conversation family a served chat's tool calls, and the toolcall family its
``python`` calls: a family's own ``actions.py`` says what its turns mean; this package only reads them.
"""
