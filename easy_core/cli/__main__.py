"""`python -m easy_core.cli`: the `easy` command."""

from easy_core.cli.app import main

main()
