"""The shape of the occtools package: no import circle between its modules, no module over
~400 lines, and every module importable with the standard library alone (the GPU machine's
python3 has no Debian packages; torch, numpy, matplotlib, transformers and tensorboard are
imported inside the functions that use them); --help lists every command; every command's
--help works; scripts/ keeps bash only for the thin entry points. Run by tests/cli/tooling.sh.
"""

import ast
import os
import re
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "occtools")


def modules():
    """{dotted name: path} of every module of the package."""
    out = {}
    for folder, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, f), ROOT)[:-3].replace(os.sep, ".")
                out[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(folder, f)
    return out


def imports_at_top(path):
    """The occtools modules a file imports at module level (not inside functions)."""
    tree = ast.parse(open(path).read())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return {n for n in names if n.startswith("occtools")}


class Package(unittest.TestCase):
    def test_no_import_circle(self):
        mods = modules()
        graph = {m: {i for i in imports_at_top(p) if i in mods and i != m} for m, p in mods.items()}
        state = {}

        def visit(m, path):
            state[m] = "open"
            for n in sorted(graph[m]):
                if state.get(n) == "open":
                    self.fail("import circle: " + " -> ".join(path + [m, n]))
                if n not in state:
                    visit(n, path + [m])
            state[m] = "done"

        for m in sorted(graph):
            if m not in state:
                visit(m, [])

    def test_no_module_over_400_lines(self):
        for m, p in modules().items():
            with open(p) as f:
                self.assertLessEqual(sum(1 for _ in f), 400, m)

    def test_every_module_imports_with_the_standard_library_alone(self):
        # A python that finds nothing but the standard library and occtools (no site-packages).
        code = "import sys, importlib; [importlib.import_module(m) for m in sys.argv[1:]]"
        r = subprocess.run([sys.executable, "-S", "-c", code, *sorted(modules())], cwd=ROOT, capture_output=True,
                           text=True, env={"PYTHONPATH": ROOT, "PYTHONDONTWRITEBYTECODE": "1"})
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_help_lists_every_command(self):
        from occtools import commands
        env = dict(os.environ, PYTHONPATH=ROOT, PYTHONDONTWRITEBYTECODE="1")
        r = subprocess.run([sys.executable, "-m", "occtools", "--help"], cwd=ROOT, capture_output=True, text=True,
                           env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        names = [m.add_parser.__module__ for _, ms in commands.GROUPS for m in ms]
        self.assertEqual(len(names), len(set(names)), "a module registered twice")
        listed = re.findall(r"^    ([a-z0-9-]+)", r.stdout, re.M)
        self.assertGreaterEqual(len(listed), len(names), r.stdout)
        for command in ("gpu-check", "gpu-verdict", "gpu-bundle", "quality", "compressors", "lep-shapes", "diloco-quality",
                        "diloco-speedup", "llama-vs-gpt2", "regime", "speedup", "bench-core", "bench-layouts",
                        "validate-planner", "plan-projection", "plan-scale-features", "first-run-time", "chaos", "bench-async-save",
                        "data-scale", "entropy-report",
                        "check-layers", "extract-kjv", "extract-gcide"):
            self.assertIn(command, listed)
        for command in listed:  # every command's own --help
            h = subprocess.run([sys.executable, "-m", "occtools", command, "--help"], cwd=ROOT, capture_output=True,
                               text=True, env=env)
            self.assertEqual(h.returncode, 0, f"{command} --help: {h.stderr}")
            self.assertIn(f"python3 -m occtools {command}", h.stdout)

    def test_bash_only_for_the_entry_points(self):
        scripts = os.path.join(ROOT, "scripts")
        self.assertEqual(sorted(os.listdir(scripts)), ["cluster.sh", "fuzz.sh", "main-job.sh", "setup.sh", "test.sh"])
        lines = sum(sum(1 for _ in open(os.path.join(scripts, f))) for f in os.listdir(scripts))
        self.assertLessEqual(lines, 800)


if __name__ == "__main__":
    unittest.main()
