"""gpu-check: the GPU acceptance checks and benchmarks, run on the GPU machine from the bundle.

cli.py is the command (plans, budget, the run); steps.py the registry and the plans;
checks_*.py the steps; verdicts.py, bench_verdicts.py and interop_verdicts.py what they
judge by; machine.py the probes; context.py what a step works with; budget.py the time
budget and its schedule; report.py the reports; verdict_cli.py the gpu-verdict command.
"""
