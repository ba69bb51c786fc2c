"""The bundle's self-description and checks: what CUDA libraries the target must provide, no
AVX-512 in an x86-64-v3 build, the newest glibc/libstdc++ symbols it needs, and MANIFEST (every
file with its size and checksum; its `built:` line names the commit, which the regime
experiment's ledger records)."""

import glob
import hashlib
import os
import re
import subprocess

from occtools.common.engine import ROOT


def cuda_needed(stage, linked):
    """The CUDA libraries the binaries need: those they link, the driver's libcuda.so.1 (the static
    CUDA runtime loads it, no NEEDED entry), cuBLAS and NCCL (opened with dlopen on first use)."""
    need = set(linked)
    exe = os.path.join(stage, "bin", "optimus-cc")
    if has_fatbin(exe):
        need.add("libcuda.so.1")
    blob = open(exe, "rb").read()
    need |= {lib for lib in ("libcublas.so.13", "libcublasLt.so.13", "libnccl.so.2") if lib.encode() in blob}
    return sorted(need)


def has_fatbin(exe):
    return ".nv_fatbin" in subprocess.run(["readelf", "-S", exe], capture_output=True, text=True).stdout


def avx512_count(stage):
    exes = [f for f in (os.path.join(stage, "bin", "optimus-cc"), os.path.join(stage, "bin", "occ_cuda_tests"))
            if os.path.exists(f)]
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", *exes], capture_output=True, text=True).stdout
    return sum(1 for line in text.splitlines() if "%zmm" in line)


def newest_symbols(stage):
    """(newest GLIBC_x, newest GLIBCXX_x) the bundle's binaries and libraries ask for."""
    files = glob.glob(os.path.join(stage, "bin", "*")) + glob.glob(os.path.join(stage, "lib", "*.so*")) + \
        glob.glob(os.path.join(stage, "lib", "openmpi3", "*.so"))
    text = subprocess.run(["objdump", "-T", *files], capture_output=True, text=True).stdout

    def newest(prefix):
        vs = set(re.findall(rf"\b{prefix}_([0-9][0-9.]*)", text))
        key = lambda v: [int(x) for x in v.strip(".").split(".") if x]  # noqa: E731
        return max(vs, key=key) if vs else None
    return newest("GLIBC"), newest("GLIBCXX")


def commit():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    c = r.stdout.strip() or "unknown"
    st = subprocess.run(["git", "-C", ROOT, "status", "--porcelain"], capture_output=True, text=True).stdout
    if any(line and not line.startswith("??") for line in st.splitlines()):
        c += " (+ uncommitted changes)"
    return c


def du_bytes(folder):
    return int(subprocess.run(["du", "-sb", folder], capture_output=True, text=True).stdout.split()[0])


def listing(stage):
    """`bytes sha256[:16]  path` of every file, sorted by path (C order)."""
    paths = sorted(os.path.relpath(os.path.join(d, f), stage) for d, _, fs in os.walk(stage) for f in fs)
    rows = []
    for p in sorted(paths, key=lambda s: s.encode()):
        with open(os.path.join(stage, p), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        rows.append(f"{os.path.getsize(os.path.join(stage, p)):<10} {digest[:16]}  {p}")
    return rows


def os_name():
    try:
        m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?$', open("/etc/os-release").read(), re.M)
        return m.group(1) if m else "unknown"
    except OSError:
        return "unknown"


def write(stage, info):
    """MANIFEST: the header lines, then the listing."""
    import datetime
    files = sum(len(fs) for _, _, fs in os.walk(stage))
    cuda = " ".join(info["cuda"]) or "none"
    head = [
        "optimus-cc GPU bundle (python3 -m occtools gpu-bundle)",
        f"built:        {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')} on {os_name()}, "
        f"commit {commit()}",
        f"binaries:     {info['from']} (-march: {info['march']}; AVX-512 instructions in optimus-cc: {info['zmm']})",
        f"CUDA:         fatbin in optimus-cc: {info['fatbin']}; occ_cuda_tests: {info['cuda_tests']}",
        f"needs there:  glibc >= {info['glibc']}, libstdc++ with "
        f"{'GLIBCXX_' + info['glibcxx'] if info['glibcxx'] else 'no GLIBCXX'}, CUDA libraries: {cuda}",
        f"gzipped:      {' '.join(info['packed']) or 'nothing'} (env.sh unpacks them on first use into "
        "$OCC_BUNDLE_CACHE, default under TMPDIR)",
        f"size:         {du_bytes(stage)} bytes before this file, {files} files + this one",
        "usage:        ./run.sh optimus-cc ...; python3 -m occtools gpu-check --first-call --out DIR (from here; "
        "docs/gpu.md)",
        "", "bytes      sha256 (16)       file"]
    body = listing(stage)
    with open(os.path.join(stage, "MANIFEST"), "w") as f:
        f.write("\n".join(head + body) + "\n")
