"""``python -m mnemex`` runs the CLI."""

from mnemex.cli import main

main()
