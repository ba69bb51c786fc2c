"""DiLoCo against per-step data parallelism (issue 34): quality.py (`diloco-quality`, the loss on
the quality model; quality_report.py its report, whose link_costs the planner reads) and
speedup.py (`diloco-speedup`, on the emulated cluster; speedup_report.py its report)."""
