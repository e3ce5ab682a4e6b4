"""The `easy` command line: one module per command group, each command parses its options,
loads params (with `--set` overrides), calls one library function and prints."""

from easy_core.cli.app import main

__all__ = ["main"]
