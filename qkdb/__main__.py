"""``python -m qkdb`` runs the CLI."""

from qkdb.cli import main

main()
