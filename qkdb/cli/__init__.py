"""The ``qkdb`` command line (typer + rich). Only this package imports typer and rich."""

from qkdb.cli.app import app, main

__all__ = ["app", "main"]
