#!/usr/bin/env bash
# Times the main job's first run on a fresh Debian 12 system (issue 33: the first iteration
# line within 5 minutes of the command, the whole job within 7), on a machine that already
# has everything installed: a bookworm chroot made by debootstrap (minbase, from the mirror
# this machine's apt uses), a clean clone of the current branch copied into it, then
# `bash scripts/main-job.sh` run inside as root with /proc, /sys and /dev mounted, every
# output line stamped with the seconds since the command started. Needs root and network
# access to the Debian mirror.
#   bash scripts/first-run-time.sh [--base DIR] [--keep]
#     --base DIR   where the pristine chroot is kept (debootstrapped once; default /var/tmp/occ-first-run)
#     --keep       leave the used chroot (DIR/run) for inspection
# Prints the seconds to the first iteration line and to the end, the load average during the
# run (other work on the machine slows it), the CPU time the job used, and writes
# DIR/first-run.log (the stamped output).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=/var/tmp/occ-first-run KEEP=0
while (($#)); do
  case $1 in
    --base) BASE=${2:?}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "usage: $0 [--base DIR] [--keep]" >&2; exit 2 ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "first-run-time: run as root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap > /dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap > /dev/null
mkdir -p "$BASE"
MIRROR=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2> /dev/null | head -n 1)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
if [[ ! -f $BASE/base.tar ]]; then
  rm -rf "$BASE/base"
  debootstrap --variant=minbase bookworm "$BASE/base" "$MIRROR" > "$BASE/debootstrap.log" 2>&1 ||
    { tail -n 5 "$BASE/debootstrap.log"; exit 1; }
  tar -C "$BASE/base" -cf "$BASE/base.tar" . && rm -rf "$BASE/base"
fi
R=$BASE/run
loadpid=
cleanup() {
  [[ -n $loadpid ]] && kill "$loadpid" 2> /dev/null
  for m in dev/shm dev/pts dev sys proc; do umount "$R/$m" 2> /dev/null || true; done
  ((KEEP)) || rm -rf "$R"
}
trap cleanup EXIT
cleanup
mkdir -p "$R" && tar -C "$R" -xf "$BASE/base.tar"
# A fresh system's apt sources (the suites this machine uses) and name resolution.
[[ -f /etc/apt/sources.list.d/debian.sources ]] && cp /etc/apt/sources.list.d/debian.sources "$R/etc/apt/sources.list.d/" &&
  rm -f "$R/etc/apt/sources.list"
cp /etc/resolv.conf "$R/etc/resolv.conf"
git clone -q --branch "$(git rev-parse --abbrev-ref HEAD)" "$(git rev-parse --show-toplevel)" "$R/root/optimus-cc"
mount -t proc proc "$R/proc" && mount -t sysfs sys "$R/sys" && mount --bind /dev "$R/dev" &&
  mount --bind /dev/pts "$R/dev/pts" && mount -t tmpfs tmpfs "$R/dev/shm"
echo "first-run-time: $(git rev-parse --short HEAD) in a fresh bookworm chroot, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
( while sleep 10; do cut -d' ' -f1 /proc/loadavg; done ) > "$BASE/load.txt" &
loadpid=$!
/usr/bin/time -o "$BASE/cpu.txt" -f "%U %S %e" chroot "$R" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb LANG=C.UTF-8 \
  bash -c 'cd /root/optimus-cc && bash scripts/main-job.sh' 2>&1 | python3 -u -c '
import sys, time
t0 = time.time()
first = None
for line in sys.stdin:
    t = time.time() - t0
    if first is None and line.startswith("iter "):
        first = t
    sys.stdout.write(f"{t:7.1f} {line}")
print(f"FIRST_ITERATION_S {first if first is None else round(first, 1)}")
print(f"TOTAL_S {time.time() - t0:.1f}")' > "$BASE/first-run.log"
rc=${PIPESTATUS[0]}
kill "$loadpid" 2> /dev/null || true
loadpid=
grep -E "^ *[0-9.]+ (setup:|preprocess:|iter |test loss|validation loss at iter 200|traffic)" "$BASE/first-run.log" | head -n 12
tail -n 2 "$BASE/first-run.log"
echo "load average (1 min) during the run: $(sort -n "$BASE/load.txt" | awk '{a[NR]=$1} END {if (NR) printf "min %s, median %s, max %s over %d samples", a[1], a[int((NR+1)/2)], a[NR], NR}')"
read -r user sys wall < "$BASE/cpu.txt" || true
echo "CPU time of the whole job: user ${user:-?} s + system ${sys:-?} s over ${wall:-?} s (on 2 idle cores, at least half of it in wall time)"
echo "main-job.sh exit status $rc; the whole output: $BASE/first-run.log"
exit "$rc"
