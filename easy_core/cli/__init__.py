"""The `easy` command line. `app` holds the Typer application and what every command shares
(the `--set` overrides, user errors as exit code 2, tables, progress); each command group is one
module (running, data, training, plans, bench, serving) whose commands parse their options, load
params, call one library function and print."""

from __future__ import annotations

import sys

import easy_core.cli.app as application

# isort: off
# Importing a group registers its commands; `easy --help` lists them in this order.
from easy_core.cli import running  # noqa: F401
from easy_core.cli import data  # noqa: F401
from easy_core.cli import training  # noqa: F401
from easy_core.cli import plans  # noqa: F401
from easy_core.cli import bench  # noqa: F401
from easy_core.cli import serving  # noqa: F401

# isort: on


def main() -> None:
    try:
        application.app()
    except KeyboardInterrupt:
        application.err.print("interrupted")
        sys.exit(130)
