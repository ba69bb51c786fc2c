"""Every command of `python3 -m occtools`, by group (the order --help lists them in). Each module
defines add_parser(subparsers), which sets the function that runs the command."""

from occtools.gpu_check import cli as gpu_check
from occtools.gpu_check import verdict_cli as gpu_verdict
from occtools import lep_shapes, llama
from occtools.quality import cli as quality

GROUPS = (
    ("experiments", (quality, lep_shapes, llama)),
    ("GPU", (gpu_check, gpu_verdict)),
)
