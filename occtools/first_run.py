"""python3 -m occtools first-run-time: the main job's first run on a fresh Debian 12 system
(issue 33: the first iteration line within 5 minutes of the command, the whole job within 7), on
a machine that already has everything installed: a bookworm chroot made by debootstrap (minbase,
from the mirror this machine's apt uses), a clean clone of the current branch copied into it,
then `bash scripts/main-job.sh` run inside as root with /proc, /sys and /dev mounted, every
output line stamped with the seconds since the command started. Needs root and network access
to the Debian mirror. Prints the seconds to the first iteration line and to the end, the load
average during the run (other work on the machine slows it), the CPU time the job used, and
writes BASE/first-run.log (the stamped output).
"""

import argparse
import os
import re
import resource
import shutil
import subprocess
import threading
import time

from occtools.common.engine import ROOT
from occtools.common.errors import Failure

MOUNTS = [("proc", "proc", ["-t", "proc", "proc"]), ("sys", "sys", ["-t", "sysfs", "sys"]),
          ("dev", "dev", ["--bind", "/dev"]), ("dev/pts", "dev/pts", ["--bind", "/dev/pts"]),
          ("dev/shm", "dev/shm", ["-t", "tmpfs", "tmpfs"])]


def add_parser(sub):
    p = sub.add_parser("first-run-time", help="the main job's first run on a fresh Debian 12 chroot, timed (issue 33)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", default="/var/tmp/occ-first-run",
                   help="where the pristine chroot is kept (debootstrapped once; default /var/tmp/occ-first-run)")
    p.add_argument("--keep", action="store_true", help="leave the used chroot (BASE/run) for inspection")
    p.set_defaults(func=main)


def sh(argv, **kw):
    return subprocess.run(argv, check=True, **kw)


def mirror():
    try:
        m = re.search(r"^URIs: *(\S+)", open("/etc/apt/sources.list.d/debian.sources").read(), re.M)
        return m.group(1) if m else "http://deb.debian.org/debian"
    except OSError:
        return "http://deb.debian.org/debian"


def pristine(base):
    """BASE/base.tar: a minbase bookworm, debootstrapped once."""
    tar = os.path.join(base, "base.tar")
    if os.path.isfile(tar):
        return tar
    root = os.path.join(base, "base")
    shutil.rmtree(root, ignore_errors=True)
    with open(os.path.join(base, "debootstrap.log"), "w") as log:
        if subprocess.run(["debootstrap", "--variant=minbase", "bookworm", root, mirror()], stdout=log,
                          stderr=subprocess.STDOUT).returncode:
            raise Failure(f"debootstrap failed: see {base}/debootstrap.log", 1)
    sh(["tar", "-C", root, "-cf", tar, "."])
    shutil.rmtree(root)
    return tar


def unmount(run):
    for sub, _, _ in reversed(MOUNTS):
        subprocess.run(["umount", os.path.join(run, sub)], stderr=subprocess.DEVNULL)


def prepare(run, tar):
    os.makedirs(run)
    sh(["tar", "-C", run, "-xf", tar])
    # A fresh system's apt sources (the suites this machine uses) and name resolution.
    if os.path.isfile("/etc/apt/sources.list.d/debian.sources"):
        shutil.copy("/etc/apt/sources.list.d/debian.sources", os.path.join(run, "etc/apt/sources.list.d/"))
        if os.path.exists(os.path.join(run, "etc/apt/sources.list")):
            os.remove(os.path.join(run, "etc/apt/sources.list"))
    shutil.copy("/etc/resolv.conf", os.path.join(run, "etc/resolv.conf"))
    branch = subprocess.run(["git", "-C", ROOT, "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    sh(["git", "clone", "-q", "--branch", branch, ROOT, os.path.join(run, "root", "optimus-cc")])
    for sub, _, args in MOUNTS:
        sh(["mount", *args, os.path.join(run, sub)])


def main(a):
    if os.geteuid() != 0:
        raise Failure("run as root (debootstrap, chroot, mount)")
    if not shutil.which("debootstrap"):
        sh(["apt-get", "install", "-y", "-q", "debootstrap"], env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
           stdout=subprocess.DEVNULL)
    os.makedirs(a.base, exist_ok=True)
    tar = pristine(a.base)
    run = os.path.join(a.base, "run")
    unmount(run)
    shutil.rmtree(run, ignore_errors=True)
    loads, stop = [], threading.Event()
    try:
        prepare(run, tar)
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        print(f"first-run-time: {commit} in a fresh bookworm chroot, {os.cpu_count()} cores, load "
              f"{' '.join(open('/proc/loadavg').read().split()[:3])}", flush=True)

        def sample():
            while not stop.wait(10):
                loads.append(float(open("/proc/loadavg").read().split()[0]))
        threading.Thread(target=sample, daemon=True).start()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        first = None
        log_path = os.path.join(a.base, "first-run.log")
        with open(log_path, "w") as log:
            p = subprocess.Popen(["chroot", run, "/usr/bin/env", "-i", "HOME=/root", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                                  "TERM=dumb", "LANG=C.UTF-8", "bash", "-c", "cd /root/optimus-cc && bash scripts/main-job.sh"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
            for line in p.stdout:
                t = time.monotonic() - t0
                if first is None and line.startswith("iter "):
                    first = t
                log.write(f"{t:7.1f} {line}")
            rc = p.wait()
            total = time.monotonic() - t0
            log.write(f"FIRST_ITERATION_S {first if first is None else round(first, 1)}\nTOTAL_S {total:.1f}\n")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        stop.set()
        unmount(run)
        if not a.keep:
            shutil.rmtree(run, ignore_errors=True)
    shown = [line for line in open(log_path) if re.match(
        r"^ *[0-9.]+ (setup:|preprocess:|iter |test loss|validation loss at iter 200|traffic)", line)]
    print("".join(shown[:12]) + "".join(open(log_path).readlines()[-2:]), end="")
    loads.sort()
    print("load average (1 min) during the run: " + (f"min {loads[0]}, median {loads[(len(loads) - 1) // 2]}, max "
                                                      f"{loads[-1]} over {len(loads)} samples" if loads else "no samples"))
    print(f"CPU time of the whole job: user {after.ru_utime - before.ru_utime:.1f} s + system "
          f"{after.ru_stime - before.ru_stime:.1f} s over {total:.1f} s (on 2 idle cores, at least half of it in wall time)")
    print(f"main-job.sh exit status {rc}; the whole output: {log_path}")
    return rc
