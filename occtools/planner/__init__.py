"""The planner's tooling: validate.py checks `optimus-cc plan` against measured runs;
projection.py and scale_features.py project the paper's settings (predictions, not measurements)."""
