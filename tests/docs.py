"""The docs' generated page: the command-line reference, from the parser itself.

``python -m tests.docs`` rewrites ``docs/cli.md``; a test fails when it is out of date.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

CLI_PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def cli_reference() -> str:
    """Every command's ``--help``, as argparse prints it at 100 columns."""
    from autotune.cli import build_parser

    os.environ["COLUMNS"] = "100"
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    parts = ["# The command line\n", "Generated from the parser (`python -m tests.docs`); "
             "`autotune COMMAND --help` prints the same.\n", "```text\n" + parser.format_help()
             + "```\n"]  # fmt: skip
    for name, command in sub.choices.items():
        parts.append(f"## autotune {name}\n\n```text\n{command.format_help()}```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    CLI_PAGE.write_text(cli_reference())
