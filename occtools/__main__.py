"""python3 -m occtools <command> [options]: optimus-cc's tooling, one command per module.
Run it from the repository's root (or with the root on PYTHONPATH); each command's --help
says what it does, what it writes and the command that regenerates a committed result.
Exit status: 0 done, 1 a run or check failed, 2 bad input, 3 bad usage or the machine cannot.
"""

import argparse
import sys

from occtools import commands
from occtools.common.errors import Failure


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(3, f"{self.prog}: error: {message}\n")


def parser():
    ap = Parser(prog="python3 -m occtools", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="<command>", parser_class=Parser)
    for _, modules in commands.GROUPS:
        for module in modules:
            module.add_parser(sub)
    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except Failure as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.status


if __name__ == "__main__":
    sys.exit(main())
