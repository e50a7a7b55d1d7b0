"""Evaluation: metrics (accuracy, avg@k, unbiased pass@k), writers, and ``evaluate()``."""

from fastrl.evaluation.metrics import (
    accuracy,
    avg_at_k,
    benchmark_metrics,
    markdown_table,
    pass_at_k,
    write_json,
    write_markdown,
)

__all__ = ["accuracy", "avg_at_k", "benchmark_metrics", "markdown_table", "pass_at_k", "write_json", "write_markdown"]
