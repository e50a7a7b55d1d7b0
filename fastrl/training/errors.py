"""Errors that stop a run with one line (the CLI prints the message, exit code 1); torch-free to
import, so the CLI can catch them without loading the trainer."""

from __future__ import annotations


class TrainingError(RuntimeError):
    """Training cannot go on (NaN loss, failed weight sync, a reward that keeps failing, a
    checkpoint that cannot be written, ...); the message says why, and where."""
