"""The race (issue 49): which plan reaches the baseline's validation loss first. Iterations to
the target come from loss runs on unshaped links (arithmetic.py reads the crossing), time per
iteration from timing runs on the emulated cluster; their product is the time to target."""
