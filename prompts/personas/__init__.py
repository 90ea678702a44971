"""Simulated-user persona prompts (``<persona>.jinja``) for ``claw_envs.conversation.LLMSimulator``."""
