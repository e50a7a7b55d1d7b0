"""Experiments: one folder per table / figure of the paper (see experiments/README.md)."""
