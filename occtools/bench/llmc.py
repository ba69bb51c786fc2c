"""llm.c's CPU reference step (karpathy/llm.c train_gpt2.c) for bench-core, from a checkout the user
points to with --llmc DIR; the repository keeps none of llm.c's code.

The harness copies train_gpt2.c into its temporary folder and edits the copy with sed (never the
checkout): the training loop's length (`step <= 40`: 41 steps, with a 64-token generation every 20)
becomes the steps the plan needs, and B / T (hard-coded 4 / 64 in main()) become the preset's when
they differ. It compiles the copy as llm.c's Makefile does on Linux with gcc (-Ofast -march=native
-fopenmp -DOMP, its warnings flags, -lm -lgomp) against the checkout's llmc/ headers, writes the
inputs train_gpt2.c reads at its fixed relative paths (llmc_inputs.py: random weights in its
checkpoint layout, random tokens) and parses its per-step `(took X ms)` lines, the first `warmup`
steps left out. Its step (data loading + forward + zero_grad + backward + AdamW) has no grad-norm
clip and weight decay 0; ours and PyTorch's clip at 1.0 and decay 0.01.
"""

import os
import re
import subprocess

from occtools.common import proc
from occtools.common.errors import Failure

CFLAGS = ["-Ofast", "-Wno-unused-result", "-Wno-ignored-pragmas", "-Wno-unknown-attributes", "-march=native",
          "-fopenmp", "-DOMP"]
LIBS = ["-lm", "-lgomp"]
STEP = re.compile(r"^step (\d+): train loss (\S+) \(took ([0-9.]+) ms\)", re.M)
NPARAMS = re.compile(r"^num_parameters: (\d+)", re.M)


def _git(src, *args):
    r = subprocess.run(["git", "-C", src, *args], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def checkout(src):
    """Checks DIR is an llm.c checkout; returns its description (commit, local changes)."""
    src = os.path.abspath(src)
    if not os.path.isfile(os.path.join(src, "train_gpt2.c")) or not os.path.isdir(os.path.join(src, "llmc")):
        raise Failure(f"--llmc {src}: no train_gpt2.c and llmc/ there; point it at a checkout of "
                      "https://github.com/karpathy/llm.c")
    commit = _git(src, "rev-parse", "HEAD")
    dirty = _git(src, "status", "--porcelain", "--", "train_gpt2.c", "llmc") if commit else None
    return {"dir": src, "commit": commit or "unknown (not a git checkout)",
            "commit_date": _git(src, "log", "-1", "--format=%cI") if commit else None,
            "local_changes": bool(dirty), "compiler": _compiler_version()}


def _compiler_version():
    r = subprocess.run(["gcc", "--version"], capture_output=True, text=True)
    return r.stdout.splitlines()[0] if r.returncode == 0 and r.stdout else "gcc (version unknown)"


def _sub_once(text, old, new, what):
    if text.count(old) != 1:
        raise Failure(f"llm.c's train_gpt2.c does not have exactly one `{old}` ({what}); this harness knows "
                      "llm.c as of commit f1e2ace (May 2025): check out that commit or a compatible one", 1)
    return text.replace(old, new)


def build(info, work, B, T, last_step, log):
    """Copies train_gpt2.c into WORK/llmc-B-T-S/, edits the copy, compiles it there. Returns
    (folder, binary, the edits as sed expressions, the compile command as a string)."""
    folder = os.path.join(work, f"llmc-B{B}-T{T}-S{last_step}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(info["dir"], "train_gpt2.c")) as fh:
        text = fh.read()
    edits = [("step <= 40", f"step <= {last_step}", "the number of steps")]
    if B != 4:
        edits.append(("int B = 4;", f"int B = {B};", "the batch size"))
    if T != 64:
        edits.append(("int T = 64;", f"int T = {T};", "the sequence length"))
    for old, new, what in edits:
        text = _sub_once(text, old, new, what)
    with open(os.path.join(folder, "train_gpt2.c"), "w") as fh:
        fh.write(text)
    exe = os.path.join(folder, "train_gpt2")
    argv = ["gcc", *CFLAGS, "-I", info["dir"], "train_gpt2.c", *LIBS, "-o", "train_gpt2"]
    f = proc.run(argv, 600, log=log, cwd=folder)
    if not f.ok:
        raise Failure(f"compiling llm.c's train_gpt2.c failed ({f.why()}): {proc.tail(log, 5)}", 1)
    seds = [f"s/{old}/{new}/" for old, new, _ in edits]
    return folder, exe, seds, " ".join(argv).replace(info["dir"], "$LLMC")


def write_inputs(python, folder, model, tokens, seed, log):
    """llm.c's checkpoint and token files in FOLDER; returns the parameter count written."""
    V = model["vocab_size"]
    Vp = (V + 127) // 128 * 128
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llmc_inputs.py")
    args = [python, script, folder, model["num_layers"], model["num_attention_heads"], model["hidden_size"], V, Vp,
            model["seq_length"], tokens, seed]
    f = proc.run(args, 900, log=log, capture=True)
    if not f.ok:
        raise Failure(f"writing llm.c's inputs failed ({f.why()}): {proc.tail(log, 5)}", 1)
    return int(f.output.strip().splitlines()[-1])


def parse(log_path, warmup, steps, repeats):
    """Per-step ms from train_gpt2.c's output, the first `warmup` left out, and the repeats (the mean
    of each `steps` consecutive timed steps, as ours and PyTorch's report them)."""
    with open(log_path, errors="replace") as fh:
        text = fh.read()
    times = [float(m.group(3)) for m in STEP.finditer(text)]
    losses = [float(m.group(2)) for m in STEP.finditer(text)]
    if len(times) != warmup + steps * repeats:
        raise Failure(f"llm.c printed {len(times)} step times, expected {warmup + steps * repeats}: "
                      f"{proc.tail(log_path, 3)}", 1)
    timed = times[warmup:]
    reps = [sum(timed[i * steps:(i + 1) * steps]) / steps for i in range(repeats)]
    m = NPARAMS.search(text)
    return {"step_ms": timed, "warmup_ms": times[:warmup], "repeat_ms": reps, "loss_first": losses[0],
            "loss_last": losses[-1], "parameters": int(m.group(1)) if m else None}
