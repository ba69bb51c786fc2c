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
    groups = []
    for group, modules in commands.GROUPS:
        before = list(sub.choices)
        for module in modules:
            module.add_parser(sub)
        groups.append(f"  {group + ':':13s}" + ", ".join(c for c in sub.choices if c not in before))
    ap.epilog = "commands by group (docs/tooling.md):\n" + "\n".join(groups)
    return ap


def main(argv=None):
    """Words after a bare `--` are the command's pass-through (args.rest: e.g. validate-planner's
    extra plan flags); only a command that sets rest=[] in its defaults takes them."""
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else None
    ap = parser()
    args = ap.parse_args(argv[:argv.index("--")] if rest is not None else argv)
    if rest is not None:
        if getattr(args, "rest", None) is None:
            ap.error(f"{args.command} takes no words after --")
        args.rest = rest
    try:
        return args.func(args)
    except Failure as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.status


if __name__ == "__main__":
    sys.exit(main())
