"""Launching the engine: where its binary is, the environment of a multi-rank run, the corpus
it trains on, and one run (a single process or `mpirun -np N`) with a log and, where asked, a
timeout (common/proc.py runs it in its own process group)."""

import os
import shutil

from occtools.common import proc
from occtools.common.errors import Failure

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KJV = os.path.join(ROOT, "data", "kjv.txt.zst")
DEFAULT_BIN = os.path.join(ROOT, "build", "optimus-cc")


def setup():
    """scripts/setup.sh, quietly: builds what changed (the experiments' default binary)."""
    f = proc.run(["bash", os.path.join(ROOT, "scripts", "setup.sh")], None, capture=True)
    if not f.ok:
        raise Failure(f"scripts/setup.sh failed ({f.why()}): {proc.oneline(f.output)[-300:]}", 1)


def binary(path=None, build=False):
    """The optimus-cc to run: PATH, else build/optimus-cc (built first by scripts/setup.sh when
    `build`). A missing binary is a one-line error that names the fix."""
    if not path and build:
        setup()
    exe = os.path.abspath(path or DEFAULT_BIN)
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        raise Failure(f"{exe} is not built; run `bash scripts/setup.sh` or pass --bin PATH")
    return exe


def private_copy(exe, folder):
    """A copy of the binary in FOLDER, so that a rebuild cannot change a running sweep."""
    os.makedirs(folder, exist_ok=True)
    dst = os.path.join(folder, "optimus-cc")
    shutil.copy2(exe, dst)
    return dst


def rank_env(threads=1, base=None, **extra):
    """The environment of ranks that share the cores: `threads` BLAS/OpenMP threads each, and Open
    MPI allowed to run as root (a container's user)."""
    env = dict(os.environ if base is None else base)
    env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def mpirun(np, argv, extra=()):
    """`mpirun -np NP --oversubscribe ARGV`: NP ranks on this machine, however many cores it has."""
    return ["mpirun", "-np", str(np), "--oversubscribe", *extra, *map(str, argv)]


def preprocess(exe, prefix, vocab_size=4096, source=KJV, extra=(), env=None):
    """PREFIX.{bin,idx,model}: SOURCE tokenized once (kept: a second call does nothing)."""
    if os.path.isfile(prefix + ".idx"):
        return prefix
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    argv = [exe, "preprocess", "--input", source, "--output-prefix", prefix]
    argv += ["--vocab-size", vocab_size] if vocab_size else []
    f = proc.run(argv + list(extra), None, env=env, capture=True)
    if not f.ok:
        raise Failure(f"preprocess of {source} failed ({f.why()}): {proc.oneline(f.output)[-300:]}", 1)
    return prefix


def train(exe, flags, metrics=None, log=None, np=1, timeout=None, env=None, mpi_extra=()):
    """`optimus-cc train FLAGS [--metrics METRICS]`, under `mpirun -np NP` when NP > 1; its output
    appended to LOG. Returns proc.Finished."""
    argv = [exe, "train", *map(str, flags)] + (["--metrics", metrics] if metrics else [])
    if np > 1:
        argv = mpirun(np, argv, mpi_extra)
    return proc.run(argv, timeout, log=log, env=env if env is not None else rank_env())


def grep_last(path, needle):
    """The last line of a log that contains NEEDLE, or ''."""
    try:
        with open(path, errors="replace") as f:
            hits = [line.rstrip("\n") for line in f if needle in line]
    except OSError:
        return ""
    return hits[-1] if hits else ""
