"""gpu-check's budget and plans (occtools/gpu_check/budget.py, steps.py), without running anything:
every plan's worst case (every command, the probes' too, to its timeout plus its kill grace) ends
by the budget; commands started one after another on a clock never outlive the deadline; a step
leaves the time its plan's more important later steps need; the first call runs the issue's
steps in the issue's order, and its predicted schedule on an H200 keeps every step of priority
1 and 2. Run by tests/cli/gpu_check_helpers.sh (python3 -m unittest).
"""

import dataclasses
import re
import unittest

from occtools.common.proc import KILL_GRACE_S
from occtools.gpu_check import budget as B
from occtools.gpu_check import catalog  # noqa: F401 - registers the steps
from occtools.gpu_check.cli import PREAMBLE
from occtools.gpu_check.steps import FIRST_CALL, PLANS, SECOND_CALL, Step, plan_steps


def toy(name, priority, predicted, caps=(60,)):
    return Step(name, lambda c, s: None, "", priority, predicted, tuple(caps))


class Budgets(unittest.TestCase):
    def test_every_plan_worst_case_ends_by_the_budget(self):
        for plan in PLANS:
            for total in (120, 440, 900):
                for quick in (False, True):
                    steps = plan_steps(plan)
                    if quick:
                        steps = [dataclasses.replace(s, predicted_s=s.quick_s) for s in steps]
                    for mode in ("worst", "predicted"):
                        _, end = B.simulate(steps, total, mode, PREAMBLE)
                        self.assertLessEqual(end, total + 1e-9, f"{plan} {total} s {mode} quick={quick}")

    def test_the_default_budget_ends_before_seven_and_a_half_minutes(self):
        _, end = B.simulate(plan_steps("first-call"), B.DEFAULT_TOTAL_S, "worst", PREAMBLE)
        self.assertLess(end, 450.0)

    def test_commands_never_outlive_the_deadline(self):
        for cap in (1, 7, 60, 300, 10**6):
            clock = B.SimClock()
            budget = B.Budget(440, clock=clock)
            started = 0
            with self.assertRaises(B.BudgetSpent):
                for _ in range(10**4):
                    t = budget.timeout(cap)
                    self.assertGreaterEqual(t, min(cap, budget.min_timeout))
                    clock.advance(t + KILL_GRACE_S + B.STEP_REPORT_S)  # ran to its timeout, killed, reported
                    started += 1
                    self.assertLessEqual(clock(), budget.deadline + 1e-9, f"cap {cap}")
            self.assertGreater(started, 0)
            self.assertLessEqual(clock() + budget.report_reserve, 440 + 1e-9)

    def test_a_step_leaves_what_more_important_later_steps_need(self):
        # 150 s: the deadline is at 140; B (priority 1) needs 51; A (priority 3, 100 s) does not fit beside it.
        steps = [toy("A", 3, 100), toy("B", 1, 50), toy("C", 2, 10)]
        rows, end = B.simulate(steps, 150, "predicted", (0, 0))
        ran = {r[0]: r[2] is not None for r in rows}
        self.assertEqual(ran, {"A": False, "B": True, "C": True})
        self.assertRegex(rows[0][3], r"kept for more important steps after it")
        # With room for both, A runs first (the plan's order).
        rows, _ = B.simulate(steps, 300, "predicted", (0, 0))
        self.assertEqual([r[0] for r in rows if r[2] is not None], ["A", "B", "C"])

    def test_a_step_may_not_take_what_it_keeps_for_later_steps(self):
        clock = B.SimClock()
        budget = B.Budget(200, clock=clock)
        sched = B.Schedule([toy("low", 3, 20), toy("high", 1, 100)], budget)
        self.assertIsNone(sched.admit(0))
        # The low-priority step's commands get at most what is left less the high one's need.
        self.assertLessEqual(budget.timeout(10**6) + KILL_GRACE_S + B.STEP_REPORT_S, 190 - 101 + 1e-9)


class FirstCall(unittest.TestCase):
    def test_the_issue_order(self):
        # The kernel twins, flash vs fused, bf16 vs fp32, our bench and PyTorch (eager, torch.compile)
        # at small and medium, micro-batch 8 then the largest, the op profiles, the speed targets.
        groups = [r"cuda_kernel_tests$", r"attention_flash_vs_fused$", r"bf16_vs_fp32$",
                  r"bench_(occ|torch)_(small|medium)(_compile)?$", r"bench_(occ|torch)_(small|medium)(_compile)?_mbmax$",
                  r"profile_occ_(small|medium)$", r"speed_targets_(small|medium)(_mbmax)?$"]
        at = [next(i for i, g in enumerate(groups) if re.match(g, n)) for n in FIRST_CALL]
        self.assertEqual(at, sorted(at), FIRST_CALL)
        self.assertEqual(set(at), set(range(len(groups))))
        for size in ("small", "medium"):
            for sfx in ("", "_mbmax"):
                want = [f"bench_occ_{size}{sfx}", f"bench_torch_{size}{sfx}", f"bench_torch_{size}_compile{sfx}"]
                self.assertEqual([n for n in FIRST_CALL if n in want], want)
        self.assertLess(FIRST_CALL.index("bench_torch_medium_compile"), FIRST_CALL.index("bench_occ_small_mbmax"))

    def test_the_second_call_holds_every_other_step(self):
        self.assertEqual(set(FIRST_CALL) & set(SECOND_CALL), set())
        self.assertEqual(SECOND_CALL[-1], "quality_regime")
        for name in ("gpu_3d_layouts", "nccl_comm", "hf_export", "hf_llama", "tensorboard"):
            self.assertIn(name, SECOND_CALL)

    def test_predicted_on_an_h200_the_essential_steps_run(self):
        steps = plan_steps("first-call")
        rows, end = B.simulate(steps, B.DEFAULT_TOTAL_S, "predicted", PREAMBLE)
        prio = {s.name: s.priority for s in steps}
        dropped = [r[0] for r in rows if r[2] is None]
        self.assertEqual([n for n in dropped if prio[n] <= 2], [], rows)
        self.assertLessEqual(end, B.DEFAULT_TOTAL_S)
        for name in ("profile_occ_small", "profile_occ_medium", "speed_targets_small", "speed_targets_medium"):
            self.assertNotIn(name, dropped)


if __name__ == "__main__":
    unittest.main()
