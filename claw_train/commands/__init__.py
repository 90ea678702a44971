"""One module per console command; each exposes a Typer ``app``."""
