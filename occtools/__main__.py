"""python3 -m occtools <command> [options]: optimus-cc's tooling, one command per module.

Commands:
  gpu-check     the GPU checks and benchmarks, run on the GPU machine from the bundle
                (--first-call: a session's first call; docs/gpu.md)
  gpu-verdict   one of gpu-check's verdicts on files (a call's runs, or inputs made by hand)

`python3 -m occtools <command> --help` says more. Exit status 3: bad usage.
"""

import argparse
import sys

from occtools.gpu_check import cli as gpu_check_cli
from occtools.gpu_check import verdict_cli

COMMANDS = (gpu_check_cli, verdict_cli)  # each module: add_parser(subparsers), setting func


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(3, f"{self.prog}: error: {message}\n")


def main(argv=None):
    ap = Parser(prog="python3 -m occtools", description=__doc__.split("\n\n")[0],
                epilog="\n\n".join(__doc__.split("\n\n")[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="<command>", parser_class=Parser)
    for module in COMMANDS:
        module.add_parser(sub)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
