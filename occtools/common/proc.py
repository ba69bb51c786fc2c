"""Running a command with a timeout, a log and an environment.

Every command runs in a process group of its own (a new session), its output
(stdout and stderr together) appended to a log file, never through a pipe: a
grandchild that outlives its parent cannot block the caller. At the timeout the
whole group gets SIGTERM, and SIGKILL `grace` seconds later, so a command
started with timeout T is over within T + grace seconds, whatever it does: the
budget of gpu-check counts on that.
"""

import os
import shlex
import signal
import subprocess
import tempfile
import time
from typing import NamedTuple, Optional

KILL_GRACE_S = 10.0  # SIGTERM -> SIGKILL
TIMED_OUT = 124  # the status of a command stopped at its timeout (as coreutils' timeout)
NOT_STARTED = 127  # the status of a command that could not start


class Finished(NamedTuple):
    rc: int  # exit status; 128 + N when killed by signal N; TIMED_OUT; NOT_STARTED
    seconds: float
    timeout: float
    output: str = ""  # with capture=True: everything it printed

    @property
    def timed_out(self):
        return self.rc == TIMED_OUT

    @property
    def ok(self):
        return self.rc == 0

    def why(self):
        """`exit status 1`, `timed out after 60 s`, ... (for a FAIL line)."""
        return why(self.rc, self.timeout)


def why(rc, timeout=None):
    if rc == TIMED_OUT:
        return f"timed out after {timeout:.0f} s" if timeout is not None else "timed out"
    if rc == 128 + signal.SIGKILL:  # not ours (a timeout is TIMED_OUT): the kernel's OOM killer, or a person
        return "killed by signal 9 (SIGKILL: out of memory?)"
    if rc == NOT_STARTED:
        return "command not found / could not start (status 127)"
    if rc > 128:
        return f"killed by signal {rc - 128}"
    return f"exit status {rc}"


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _stop_group(proc, grace):
    """SIGTERM to the command's process group, SIGKILL after `grace` seconds to whatever of the
    group is left: the command itself may end at once while a rank that handles SIGTERM (train's
    --exit-signal-handler) or a grandchild that ignores it goes on."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _group_alive(proc.pid):
            return
        time.sleep(0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run(argv, timeout, log=None, env=None, cwd=None, grace=KILL_GRACE_S, capture=False, header=None) -> Finished:
    """Runs argv (a list of words) for at most `timeout` seconds (+ `grace` to stop it);
    timeout None: as long as it takes (an experiment's training run).

    log: a file the output is appended to (after a `+ command (timeout T s)` line, or
    `header` when given); capture: also return the output (read back from the log, or
    from a temporary file when there is no log). env: the whole environment (None: ours).
    """
    argv = [str(a) for a in argv]
    timeout = None if timeout is None else max(0.0, float(timeout))
    tmp = None
    if log is None and capture:
        fd, tmp = tempfile.mkstemp(prefix="occtools-", suffix=".out")
        os.close(fd)
    path = log if log is not None else tmp
    start_offset = 0
    t0 = time.monotonic()
    with open(path, "ab") if path else open(os.devnull, "wb") as out:
        if log is not None:
            limit = "" if timeout is None else f" (timeout {timeout:.0f} s)"
            line = header if header is not None else f"+ {shlex.join(argv)}{limit}"
            out.write((line + "\n").encode())
            out.flush()
        start_offset = out.tell() if path else 0
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    cwd=cwd, start_new_session=True)
        except OSError as e:
            out.write(f"cannot start {argv[0]}: {e}\n".encode())
            rc = NOT_STARTED
        else:
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _stop_group(proc, grace)
                rc = TIMED_OUT
                out.write(f"[stopped after its timeout of {timeout:.0f} s]\n".encode())
            except BaseException:  # an interrupt of ours: do not leave the command behind
                _stop_group(proc, 0.5)
                raise
            if rc < 0:
                rc = 128 - rc
    text = ""
    if capture and path:
        with open(path, "rb") as f:
            f.seek(start_offset)
            text = f.read().decode("utf-8", "replace")
    if tmp:
        os.unlink(tmp)
    return Finished(rc, time.monotonic() - t0, timeout, text)


def tail(path, lines=3, width=None):
    """The last `lines` lines of a file, flattened to one line (for a result line)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    s = oneline(" ".join(text.splitlines()[-lines:]))
    return s[:width] if width else s


def oneline(text: Optional[str]) -> str:
    """Whitespace (tabs, newlines) collapsed to single spaces."""
    return " ".join(str(text or "").split())
