"""optimus-cc's tooling: checks, benchmarks and experiments around the engine.

One entry point, `python3 -m occtools <command>` (occtools/__main__.py lists the
commands); one module (or package) per command; what several commands share lives
in occtools/common. Standard library only, except where a command needs more (numpy,
torch, transformers), which it imports where it uses them.
"""
