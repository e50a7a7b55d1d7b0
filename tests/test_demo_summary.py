"""`fastrl demo`'s summary in words claims an interval only where the validation's samples varied,
and says what the interval is over (issue 27: greedy smoke validation printed '±0.0: more than the
validation's noise explains')."""

from __future__ import annotations

from fastrl.demo import in_words


def _arm(acc: float, se: float) -> dict:
    return {"wall_s": 10.0, "cpu_s": 10.0, "acc_after": acc, "acc_after_se": se, "kept_fraction": 0.5,
            "val_problems": 64, "val_samples_per_problem": 8}


def test_no_interval_where_nothing_varies():
    text = in_words({"grpo": _arm(0.50, 0.0), "fastrl": _arm(0.494, 0.0)})
    line = text.splitlines()[0]
    assert "±" not in line and "noise explains" not in line and "within" not in line
    assert "no interval" in line and "8 samples per problem on the same 64 problems" in line


def test_interval_says_what_it_is_over():
    line = in_words({"grpo": _arm(0.50, 0.01), "fastrl": _arm(0.45, 0.01)}).splitlines()[0]
    assert "95 % interval ±2.8 over the validation's 8 samples per problem on the same 64 problems" in line
    assert "more than the validation's noise explains" in line
    assert "within the validation's noise" in in_words({"grpo": _arm(0.50, 0.01), "fastrl": _arm(0.49, 0.01)})
