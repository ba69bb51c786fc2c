"""What gpu-check learns about the machine before its steps: the GPU (nvidia-smi), the
PyTorch python and its packages, the bundle, the CUDA libraries the binaries will load,
and what this optimus-cc can do (its --help texts). Also why the GPU side is missing,
when it is (every step that needs it then says so).
"""

import json
import os
import re
import shutil

from occtools.common import proc

HELP_COMMANDS = ("train", "reference-dump", "bench", "export", "comm-check")


def pick_python(candidates, run):
    """The first python that imports torch and numpy (the GPU machine's PyTorch python)."""
    for c in candidates:
        exe = shutil.which(c) if c else None
        if exe and run([exe, "-c", "import torch, numpy"], 120).rc == 0:
            return exe
    return shutil.which("python3") or "python3"


class Machine:
    """run(argv, cap, log=None, env=None, capture=False) -> proc.Finished: the context's budgeted runner."""

    def __init__(self, bundle, work, python, gdev, run, package_root):
        self.bundle, self.work, self.python, self.gdev, self._run = bundle, work, python, gdev, run
        self.package_root = package_root
        self.help = {}
        self.probe = {}
        self.gpus = 0
        self.cuda_libdirs = ""
        self.lines = {}
        self.no_gpu_side, self.no_gpu_status = "", "SKIP"

    def has_flag(self, command, flag):
        return re.search(r"(^|[ ,])" + re.escape(flag) + r"([ =,:]|$)", self.help.get(command, ""), re.M) is not None

    def read(self):
        """Every probe, in order; prints the lines the report starts with."""
        self._gpu()
        self._python()
        self._bundle()
        self._engine()
        return self

    def _out(self, argv, cap, env=None):
        f = self._run(argv, cap, env=env, capture=True)
        return f.rc, f.output

    def _gpu(self):
        self.lines["gpu_line"] = "no GPU: nvidia-smi not found"
        if not shutil.which("nvidia-smi"):
            return
        rc, q = self._out(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"], 30)
        rows = [r for r in q.splitlines() if r.strip()]
        if rc != 0 or not rows:
            self.lines["gpu_line"] = "no GPU: nvidia-smi failed: " + proc.oneline(q)[:200]
            return
        self.gpus = len(rows)
        _, full = self._out(["nvidia-smi"], 30)
        cuda = re.search(r"CUDA Version: ([0-9.]+)", full)
        name, mem, driver = (x.strip() for x in (rows[0].split(",") + ["?", "?"])[:3])
        line = f"GPU: {name} ({mem}), driver {driver}, CUDA (driver) {cuda.group(1) if cuda else '?'}"
        if self.gpus > 1:
            line += f"; {self.gpus} GPUs, the checks use GPU 0"
        self.lines["gpu_line"] = line

    def _python(self):
        env = {"PYTHONPATH": self.package_root}
        rc, text = self._out([self.python, "-m", "occtools", "gpu-verdict", "probe"], 120, env)
        try:
            self.probe = json.loads(text.strip().splitlines()[-1]) if rc == 0 else {}
        except (ValueError, IndexError):
            self.probe = {}
        j = self.probe
        if not j:
            self.lines["torch_line"] = f"python: {self.python} (probe failed: {proc.oneline(text)[-200:]})"
            return
        t = j.get("torch", "not importable: " + j.get("torch_error", "?"))
        s = f"python: {j.get('executable', '?')} {j.get('python', '?')}: torch {t}"
        if "torch" in j:
            seen = (f"sees {j['gpu']} sm_{str(j.get('gpu_sm', '?')).replace('.', '')}" if j.get("cuda_available")
                    else "no GPU visible")
            s += f" (CUDA {j.get('torch_cuda')}, {seen})"
        for k in ("numpy", "transformers", "safetensors", "tensorboard"):
            s += f", {k} {j.get(k, 'missing')}"
        self.lines["torch_line"] = s

    def _bundle(self):
        manifest = os.path.join(self.bundle, "MANIFEST")
        try:
            with open(manifest) as f:
                text = f.read()
        except OSError:
            text = ""
        field = {k: (re.search(rf"^{k}:\s*(.*)$", text, re.M) or [None, "?"])[1] for k in ("built", "binaries", "CUDA")}
        self.manifest_head = "\n".join(text.splitlines()[:8])
        self.fatbin = "fatbin in optimus-cc: no" not in text
        self.lines["bundle_line"] = f"bundle: {self.bundle}: {field['built']}; {field['binaries']}; CUDA {field['CUDA']}"

    def _engine(self):
        # The CUDA libraries the binaries need, found once by env.sh, then kept for every run.sh.
        env_sh = os.path.join(self.bundle, "env.sh")
        _, out = self._out(["bash", "-c", 'unset OCC_CUDA_LIBDIRS; source "$1" > /dev/null 2>&1; echo "$OCC_CUDA_LIBDIRS"',
                            "_", env_sh], 60)
        self.cuda_libdirs = out.strip().splitlines()[-1] if out.strip() else ""
        run_sh = os.path.join(self.bundle, "run.sh")
        rc, text = self._out([run_sh, "optimus-cc", "--help"], 60, {"OCC_CUDA_LIBDIRS": self.cuda_libdirs})
        self.help["main"] = text
        self.engine_ok = rc == 0
        if not self.engine_ok:
            self.no_gpu_side = "optimus-cc does not start here: " + proc.oneline(" ".join(text.splitlines()[-2:]))
            _, ldd = self._out(["bash", "-c", 'source "$1/env.sh" > /dev/null 2>&1; ldd "$1/bin/optimus-cc"', "_",
                                self.bundle], 60)
            missing = [l.split()[0] for l in ldd.splitlines() if "not found" in l]
            if missing:
                self.no_gpu_side += (f" (libraries not found: {' '.join(missing)}; CUDA folders searched: "
                                     f"{self.cuda_libdirs or 'none found'})")
            self.no_gpu_status = "FAIL"
        for c in HELP_COMMANDS:
            self.help[c] = self._out([run_sh, "optimus-cc", c, "--help"], 60, {"OCC_CUDA_LIBDIRS": self.cuda_libdirs})[1]

        def feat(c, f):
            return f"{f} {'yes' if self.has_flag(c, f) else 'no'}"

        self.lines["features_line"] = (
            f"engine features: train: {feat('train', '--device')}, {feat('train', '--bf16')}, {feat('train', '--fp16')}, "
            f"{feat('train', '--recompute-granularity')}, {feat('train', '--attention-backend')}; reference-dump: "
            f"{feat('reference-dump', '--device')}, {feat('reference-dump', '--load')}; bench: {feat('bench', '--device')}, "
            f"{feat('bench', '--bf16')}, {feat('bench', '--op-profile')}; CUDA libraries from: "
            f"{self.cuda_libdirs or 'the system loader'}")
        if self.engine_ok and self.gdev == "cuda":
            if not self.gpus:
                self.no_gpu_side = "no GPU (" + self.lines["gpu_line"].replace("no GPU: ", "") + ")"
            elif not self.fatbin:
                self.no_gpu_side = "the bundle's optimus-cc has no CUDA code (built without the CUDA backend: see its MANIFEST)"
            elif not self.has_flag("train", "--device"):
                self.no_gpu_side = "optimus-cc train has no --device: this binary has no CUDA backend"

    def unmet(self, needs):
        """(status, why) for the first need of a step this machine does not meet, else None."""
        if self.no_gpu_side and ("gpu" in needs or "cuda" in needs):
            return self.no_gpu_status, self.no_gpu_side
        if "cuda" in needs and self.gdev != "cuda":
            return "SKIP", f"needs the GPU itself (--gpu-device {self.gdev})"
        if "cuda-tests" in needs and not os.access(os.path.join(self.bundle, "bin", "occ_cuda_tests"), os.X_OK):
            return "SKIP", "no bin/occ_cuda_tests in the bundle (built without CUDA)"
        for pkg in ("torch", "numpy", "tensorboard"):
            if pkg in needs and pkg not in self.probe:
                err = self.probe.get(pkg + "_error", "the probe failed")
                return "SKIP", f"{self.python} cannot import {pkg} ({err})"
        if "torch-cuda" in needs:
            if "torch" not in self.probe:
                return "SKIP", f"{self.python} cannot import torch ({self.probe.get('torch_error', 'the probe failed')})"
            if self.gdev == "cuda" and not self.probe.get("cuda_available"):
                return "SKIP", f"{self.python}'s torch sees no GPU"
        return None
