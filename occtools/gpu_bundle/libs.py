"""The shared libraries the bundle's binaries need, gathered from this Debian system: every
library that is not glibc, the C++ runtime (the target's newer ones serve) or CUDA's (the
target has them; env.sh finds them), Open MPI's MCA components that load with these libraries
(not the UCX, libfabric, PSM, verbs or OpenSHMEM ones), its help files and configuration.

liblapack.so.3: liblapacke.so.3 needs it, but every LAPACK routine we call (sgeqrf_, sorgqr_)
binds to libopenblas.so.0, which the binary loads first and which holds all of LAPACK;
Debian's 7 MB liblapack.so.3 is therefore replaced by an empty library of that soname that
depends on libopenblas.so.0 (liblapacke is linked BIND_NOW, so a LAPACK symbol that
libopenblas lacked would fail at load, not at the call).
"""

import glob
import os
import re
import shutil
import subprocess

from occtools.common.errors import Failure

# Libraries the target provides itself: glibc, the C++ runtime, CUDA's, and PCRE2 (every
# Debian/Ubuntu base system has libpcre2-8.so.0: grep and libselinux need it).
CUDA = (r"libcuda|libcudart|libcublas|libnvidia|libnvrtc|libnvJitLink|libcufft|libcurand|libcusolver|libcusparse|"
        r"libcudnn|libnccl|libnvToolsExt|libcupti")
SYSTEM = re.compile(r"^(linux-vdso|ld-linux|libc\.so|libpcre2-8\.|libm\.so|libmvec|libdl\.|libpthread|librt\.|"
                    r"libresolv|libutil\.|libanl|libstdc\+\+|libgcc_s|" + CUDA + ")")
IS_CUDA = re.compile("^(" + CUDA + ")")
# MCA components whose dependencies are heavy (RDMA fabrics): left out.
HEAVY = re.compile(r"^(libucp|libucs|libuct|libucm|libfabric|libpsm|libibverbs|librdmacm|libefa|liboshmem|"
                   r"libmca_common_ucx|libmca_common_ofi|libmca_common_verbs|libinfinipath)")
MCA_CONF = """
# ---- optimus-cc GPU bundle (python3 -m occtools gpu-bundle) ----
# One machine without ssh: launch local ranks directly (the rsh launcher refuses to start
# when it finds no ssh/rsh, even for a single-node job).
plm = isolated
# Containers and microVMs may refuse process_vm_readv (CMA): copy through shared memory.
btl_vader_single_copy_mechanism = none
"""


def out(argv, env=None):
    return subprocess.run(argv, capture_output=True, text=True, env=env).stdout


def ldd(path, env=None):
    """[(name, path or None)] of a file's whole closure of shared libraries."""
    return parse_ldd(out(["ldd", path], env))


def parse_ldd(text):
    deps = []
    for line in text.splitlines():
        w = line.split()
        if len(w) >= 3 and w[1] == "=>":
            deps.append((w[0], None if w[2] == "not" else w[2]))
    return deps


def ldd_many(paths):
    """{file: [(name, path)]} from one ldd over many files ("FILE:" headers, then its lines)."""
    res, cur = {}, None
    for line in out(["ldd", *paths]).splitlines():
        if line.startswith("/") and line.rstrip().endswith(":"):
            cur = line.rstrip()[:-1]
            res[cur] = []
        elif cur is not None:
            res[cur] += parse_ldd(line)
    return res


def ompi_dirs():
    """Where Debian's Open MPI keeps its components, help files and configuration."""
    m = re.search(r"^path:pkglibdir:(.*)$", out(["ompi_info", "--path", "pkglibdir", "--parsable"]), re.M)
    pkglib = m.group(1).strip() if m else ""
    if not os.path.isdir(pkglib):
        m = re.search(r"libmpi\.so\.40 .*=> (\S+)", out(["ldconfig", "-p"]))
        pkglib = os.path.join(os.path.dirname(os.path.realpath(m.group(1))), "openmpi", "lib", "openmpi3") if m else ""
    if not os.path.isdir(pkglib):
        raise Failure(f"Open MPI's component folder not found (tried {pkglib or 'ompi_info, ldconfig'})", 1)
    return pkglib, "/usr/share/openmpi", "/etc/openmpi"


def copy_mpi(stage, sources):
    """mpirun (orterun) and orted, the MCA components, help files and configuration; returns the
    components' dependencies and how many were copied."""
    mpirun = shutil.which("orterun") or shutil.which("mpirun.openmpi")
    orted = shutil.which("orted")
    if not mpirun or not orted:
        raise Failure("Open MPI's orterun/orted not found (openmpi-bin)", 1)
    for name, path in (("mpirun", mpirun), ("orted", orted)):
        shutil.copy(os.path.realpath(path), os.path.join(stage, "bin", name))
        sources.append((f"bin/{name}", os.path.realpath(path)))
    pkglib, datadir, sysconf = ompi_dirs()
    comps = sorted(glob.glob(os.path.join(pkglib, "*.so")))
    deps, n = [], 0
    for f, d in ldd_many(comps).items():
        if any(HEAVY.match(name) for name, _ in d):
            continue
        shutil.copy(f, os.path.join(stage, "lib", "openmpi3"))
        deps += d
        n += 1
    if n <= 20:
        raise Failure(f"only {n} Open MPI components copied from {pkglib}", 1)
    shutil.copytree(datadir, os.path.join(stage, "share", "openmpi"), symlinks=True)
    sources += [("lib/openmpi3/", pkglib + "/"), ("share/openmpi/", datadir + "/"), ("etc/", sysconf + "/")]
    hostfile = os.path.join(sysconf, "openmpi-default-hostfile")
    if os.path.exists(hostfile):
        shutil.copy(hostfile, os.path.join(stage, "etc"))
    else:
        open(os.path.join(stage, "etc", "openmpi-default-hostfile"), "w").close()
    conf = os.path.join(sysconf, "openmpi-mca-params.conf")
    with open(os.path.join(stage, "etc", "openmpi-mca-params.conf"), "w") as f:
        f.write((open(conf).read() if os.path.exists(conf) else "") + MCA_CONF)
    return deps, n


def copy_libraries(stage, deps, sources):
    """The libraries of bin/* and the components' DEPS (system ones aside, the lapack stub in
    liblapack.so.3's place); returns the CUDA libraries the target must provide."""
    libpath, missing, cuda = {}, [], set()
    for f in sorted(glob.glob(os.path.join(stage, "bin", "*"))):
        deps = deps + ldd(f)
    for name, path in sorted(set(deps)):
        if SYSTEM.match(name):
            if IS_CUDA.match(name):
                cuda.add(name)
            continue
        if path is None:
            missing.append(name)
        else:
            libpath[name] = path
    if missing:
        raise Failure(f"libraries not found on this machine: {' '.join(sorted(set(missing)))}", 1)
    stub = "liblapack.so.3" in libpath and "libopenblas.so.0" in libpath
    for name, path in libpath.items():
        if name == "liblapack.so.3" and stub:
            continue
        shutil.copy(os.path.realpath(path), os.path.join(stage, "lib", name))
        sources.append((f"lib/{name}", os.path.realpath(path)))
    if "liblapack.so.3" in libpath:
        if not stub:
            raise Failure("liblapack.so.3 needed but libopenblas.so.0 is not", 1)
        lapack_stub(stage, os.path.realpath(libpath["liblapack.so.3"]), sources)
    for f in glob.glob(os.path.join(stage, "lib", "**"), recursive=True):
        os.chmod(f, os.stat(f).st_mode | 0o200)
    return cuda


def lapack_stub(stage, original, sources):
    c = os.path.join(stage, "lapack-stub.c")
    with open(c, "w") as f:
        f.write("void occ_bundle_lapack_is_in_libopenblas(void) {}\n")
    lib = os.path.join(stage, "lib", "liblapack.so.3")
    r = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", lib, "-Wl,-soname,liblapack.so.3", "-Wl,--no-as-needed",
                        c, "-L" + os.path.join(stage, "lib"), "-l:libopenblas.so.0"], capture_output=True, text=True)
    os.remove(c)
    if r.returncode != 0:
        raise Failure(f"the liblapack.so.3 stub did not build: {r.stderr.strip()}", 1)
    subprocess.run(["strip", "--strip-unneeded", lib], check=True)
    sources.append(("lib/liblapack.so.3", f"{original} (stub: LAPACK comes from libopenblas.so.0)"))


def check_closure(stage):
    """Every dependency of bin/* resolves inside lib/ (with only the bundle's libraries in view)."""
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(stage, "lib"))
    for f in sorted(glob.glob(os.path.join(stage, "bin", "*"))):
        for name, path in ldd(f, env):
            if not SYSTEM.match(name) and path != os.path.join(stage, "lib", name):
                raise Failure(f"{os.path.basename(f)}: {name} resolves to {path or 'nothing'}, not the bundle", 1)


def gzip_large(stage, sources):
    """Libraries over 1 MiB (OpenBLAS: 35 MB of kernels for every x86 generation; libgfortran,
    liblapacke, libpmix, SentencePiece's, libmpi) travel gzipped; env.sh unpacks them on first
    use. (4 MiB until the block codecs grew the binaries past the bundle's 60 MiB; 2 MiB until
    the adaptive, topk2 and oneDNN code did it again.)"""
    packed = []
    for f in sorted(glob.glob(os.path.join(stage, "lib", "*.so*"))):
        if os.path.isfile(f) and os.path.getsize(f) > 1024 * 1024:
            subprocess.run(["gzip", "-9", "-n", f], check=True)
            name = os.path.basename(f)
            packed.append(name)
            sources[:] = [(b + ".gz" if b == f"lib/{name}" else b, o) for b, o in sources]
    return packed
