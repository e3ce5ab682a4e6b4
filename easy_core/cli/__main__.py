"""`python -m easy_core.cli`: the `easy` command."""

from easy_core.cli import main

main()
