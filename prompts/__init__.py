"""Judge and simulated-user prompt templates (Jinja2 text files, written in our own words)."""

from pathlib import Path

PROMPTS_DIR = Path(__file__).parent
