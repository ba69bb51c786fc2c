"""python3 -m occtools check-layers [SRC]: the architecture's rule that dependencies point one way,

    core -> {kernels, comm, data} -> parallel -> compress -> model -> train -> plan -> apps

A file under src/LAYER/ may include headers of its own layer and of the layers before it, never
of a later one; kernels, comm and data share a rank and do not include each other. Prints every
offending include as FILE:LINE: ... and exits 1 if there is one (0 when the tree is clean).
"""

import argparse
import os
import re

from occtools.common.engine import ROOT
from occtools.common.errors import Failure

RANK = {"core": 0, "kernels": 1, "comm": 1, "data": 1, "parallel": 2, "compress": 3, "model": 4, "train": 5, "plan": 6,
        "apps": 7}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SUFFIXES = (".h", ".cpp", ".cu", ".cuh")


def add_parser(sub):
    p = sub.add_parser("check-layers", help="no source file includes a header of a layer above its own (cli.layers)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", nargs="?", default=os.path.join(ROOT, "src"), help="default: the repository's src/")
    p.set_defaults(func=main)


def offences(src):
    """The lines naming every include that points up (or sideways) the layers, and every file in no layer."""
    bad = []
    for folder, _, files in sorted(os.walk(src)):
        for name in sorted(files):
            if not name.endswith(SUFFIXES):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, src)
            layer = rel.split(os.sep)[0]
            with open(path, errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    if layer not in RANK:
                        bad.append(f"src/{rel}:{n}: file is in no layer ({layer}/); add its directory to "
                                   "occtools/check_layers.py")
                        break
                    parts = m.group(1).split("/")
                    to = parts[0]
                    if to not in RANK or len(parts) < 2 or not parts[1]:
                        continue  # not one of our layers (a sibling header or a library)
                    if RANK[to] > RANK[layer] or (RANK[to] == RANK[layer] and to != layer):
                        bad.append(f"src/{rel}:{n}: includes \"{m.group(1)}\": layer {layer} may not depend on {to}")
    return bad


def main(a):
    if not os.path.isdir(a.src):
        raise Failure(f"no directory {a.src}")
    bad = offences(a.src)
    for line in bad:
        print(line)
    if bad:
        return 1
    print(f"check-layers: every include in {a.src} points down the layers")
    return 0
