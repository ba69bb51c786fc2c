"""The time budget of a gpu-check call, and the plan's schedule under it.

A call has `total` seconds of wall time in all (440 by default: the device tool's
call runs 8 minutes at most, and the worst case must end before 7 min 30 s).
`report_reserve` of them are kept for the last report. Every command gets a timeout
of at most what is left of the rest less its kill grace (proc.KILL_GRACE_S) and less
what the plan keeps for more important steps later in the order; a command that
would get less than `min_timeout` does not start. So however long the commands
would take, the call is over by start + total: no sum of caps can overrun it.

Which steps run is decided as each comes up (Schedule.admit): a step starts when
what is left, less what the plan keeps for the more important steps after it
(their predicted seconds), covers its own predicted seconds. The same code, with a
clock of its own, simulates a plan (Schedule.simulate): with every step taking its
predicted time (what the call should do), or its worst case (every command to its
timeout plus its kill grace), which `gpu-check --plan` prints and the tests assert.
"""

import time

from occtools.common.proc import KILL_GRACE_S

DEFAULT_TOTAL_S = 440.0  # the worst case ends 10 s before 7 min 30 s
REPORT_RESERVE_S = 10.0
MIN_TIMEOUT_S = 5.0
STEP_REPORT_S = 1.0  # kept after each step's commands for its reports (gpu-check.json/.md, the archive)


class BudgetSpent(Exception):
    """A command was not started: too little of the budget left for its minimum timeout."""


class Budget:
    def __init__(self, total=DEFAULT_TOTAL_S, clock=time.monotonic, grace=KILL_GRACE_S,
                 report_reserve=REPORT_RESERVE_S, min_timeout=MIN_TIMEOUT_S):
        self.total, self.clock, self.grace = float(total), clock, float(grace)
        self.report_reserve, self.min_timeout = float(report_reserve), float(min_timeout)
        self.start = clock()
        self.deadline = self.start + self.total - self.report_reserve
        self.reserved = 0.0  # kept, during the current step, for the more important steps after it

    def elapsed(self):
        return self.clock() - self.start

    def left(self):
        """Seconds until the commands' deadline."""
        return self.deadline - self.clock()

    def available(self):
        """Seconds the current step may use: what is left less what later, more important steps keep."""
        return self.left() - self.reserved

    def timeout(self, cap, what="a command"):
        """The timeout of a command that wants at most `cap` seconds; BudgetSpent when it cannot get
        `min_timeout` (its kill grace comes on top, inside what is available)."""
        room = self.available() - self.grace - STEP_REPORT_S
        t = min(float(cap), room)
        if room < min(float(cap), self.min_timeout):
            raise BudgetSpent(f"time budget spent: {max(0.0, self.available()):.0f} s left for {what} "
                              f"(of {self.total:.0f} s; {self.reserved:.0f} s kept for later steps), "
                              f"needs at least {self.min_timeout + self.grace + STEP_REPORT_S:.0f} s")
        return t


class Schedule:
    """The steps of a plan (objects with name, priority, predicted_s, worst_s) in their order,
    and which of them have run; priority 1 is the most important."""

    def __init__(self, steps, budget):
        self.steps = list(steps)
        self.budget = budget
        self.settled = set()  # names run or skipped

    def need(self, step):
        """What a step needs to start: its predicted seconds (a command at least its minimum timeout and
        kill grace), and its report."""
        floor = self.budget.min_timeout + self.budget.grace if step.caps else 0.0
        return max(step.predicted_s, floor) + STEP_REPORT_S

    def kept_for_later(self, index):
        """What the steps after `index` that are more important, and not settled yet, need."""
        me = self.steps[index]
        return sum(self.need(s) for s in self.steps[index + 1:] if s.priority < me.priority and s.name not in self.settled)

    def admit(self, index):
        """None when step `index` may start now (and the budget keeps what later steps need), else why not."""
        step = self.steps[index]
        self.budget.reserved = self.kept_for_later(index)
        avail = self.budget.available()
        if avail < self.need(step):
            kept = f", {self.budget.reserved:.0f} s kept for more important steps after it" if self.budget.reserved else ""
            return (f"time budget: {max(0.0, avail):.0f} s available{kept}, it is predicted to take "
                    f"{step.predicted_s:.0f} s")
        return None

    def settle(self, name):
        self.settled.add(name)
        self.budget.reserved = 0.0

    def simulate(self, mode):
        """Walks the plan on this schedule's budget (whose clock must be settable: a SimClock), each
        admitted step taking its predicted seconds (mode 'predicted') or its worst case bounded by
        what it may use (mode 'worst'). Returns [(name, start_s, seconds or None when skipped,
        why skipped)] and the call's end (seconds from the start, final report included)."""
        clock = self.budget.clock
        rows = []
        for i, step in enumerate(self.steps):
            t0 = self.budget.elapsed()
            why = self.admit(i)
            if why:  # a skipped step writes no report of its own (the next one, or the last, says it)
                rows.append((step.name, t0, None, why))
            else:
                room = max(0.0, self.budget.available() - STEP_REPORT_S)
                cost = step.predicted_s if mode == "predicted" else min(step.worst_s, room)
                clock.advance(cost + STEP_REPORT_S)
                rows.append((step.name, t0, cost, ""))
            self.settle(step.name)
        return rows, self.budget.elapsed() + self.budget.report_reserve


class SimClock:
    """A clock that moves only when told (for Schedule.simulate)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += float(seconds)


def simulate(steps, total, mode, preamble):
    """A plan's schedule on a fresh simulated budget: the preamble (probes: predicted, worst) first."""
    clock = SimClock()
    budget = Budget(total, clock=clock)
    clock.advance(preamble[0] if mode == "predicted" else min(preamble[1], budget.left()))
    return Schedule(steps, budget).simulate(mode)
