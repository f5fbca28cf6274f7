"""What the project declares: CI script, documented examples, baselines."""
