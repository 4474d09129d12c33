"""The `pardnn` command line: one module per subcommand under pardnn.commands.

Exit codes: 0 success; 2 bad input or infeasible request, with one line on stderr
naming the file or flag; 1 only for internal bugs.
"""

import argparse
import importlib
import sys

from pardnn.base.errors import UserError

__all__ = ["main"]     # `main(argv) -> exit code`, the command line from Python

# The subcommands, in --help order: each module adds its parser (imported by name, so
# tests/test_layout.py reads these strings as imports).
COMMANDS = ("pardnn.commands.models", "pardnn.commands.profile", "pardnn.commands.place",
            "pardnn.commands.capacity", "pardnn.commands.emulate", "pardnn.commands.explain",
            "pardnn.commands.compare", "pardnn.commands.run", "pardnn.commands.links")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit code 2."""

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pardnn", description="Place a TensorFlow graph's operations across devices (ParDNN).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in COMMANDS:
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except UserError as exc:
        print(f"pardnn {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pardnn: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
