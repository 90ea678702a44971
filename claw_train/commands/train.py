"""`claw-train` — not built yet (see the open issues)."""

import typer

app = typer.Typer(add_completion=False, help="claw-train: not built yet.")


@app.command()
def main() -> None:
    """Not built yet."""
    typer.echo("claw-train is not built yet: it lands with its issue (see README, 'Status').", err=True)
    raise typer.Exit(2)
