"""Built-in persona files (``<name>.yaml``), read by ``claw_envs.conversation.persona.load_persona``."""
