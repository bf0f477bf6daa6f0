"""The ``kdsm`` command: the CLI entry point and its subcommands."""
