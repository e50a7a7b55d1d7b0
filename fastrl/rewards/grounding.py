"""Grounding reward: IoU of the first box in the answer with the ground-truth box, in [0, 1].

Boxes are ``[x1, y1, x2, y2]`` (or with parentheses; a Qwen-style ``{"bbox_2d": [...]}`` also
matches). The answer region is the ``\\boxed{}`` content when there is one, else the text after the
last ``</thinking>``, else the whole response. ``overall`` = ``accuracy`` = ``iou`` (continuous;
the format indicator is reported but not added, so the reward stays in [0, 1]).
"""

from __future__ import annotations

import re

from fastrl.rewards.common import extract_boxed, format_ok, normalize_tags

_NUM = r"(-?\d+(?:\.\d+)?)"
_BOX_RE = re.compile(rf"[\[\(]\s*{_NUM}\s*,\s*{_NUM}\s*,\s*{_NUM}\s*,\s*{_NUM}\s*[\]\)]")

Box = tuple[float, float, float, float]


def parse_box(text: str) -> Box | None:
    """The first ``[x1, y1, x2, y2]`` in ``text``, or None."""
    m = _BOX_RE.search(text)
    if not m:
        return None
    return tuple(float(v) for v in m.groups())  # type: ignore[return-value]


def box_iou(a: Box, b: Box) -> float:
    """IoU of two ``(x1, y1, x2, y2)`` boxes; a degenerate box (x2 ≤ x1 or y2 ≤ y1) gives 0."""
    ax1, ay1, ax2, ay2 = a
    bx1, by1, bx2, by2 = b
    if ax2 <= ax1 or ay2 <= ay1 or bx2 <= bx1 or by2 <= by1:
        return 0.0
    iw = max(0.0, min(ax2, bx2) - max(ax1, bx1))
    ih = max(0.0, min(ay2, by2) - max(ay1, by1))
    inter = iw * ih
    union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter
    return inter / union if union > 0 else 0.0


def answer_region(response: str) -> str:
    boxed = extract_boxed(response)
    if boxed is not None:
        return boxed
    if "</thinking>" in response:
        return response.rsplit("</thinking>", 1)[1]
    return response


def ground_truth_problem(ground_truth: str) -> str | None:
    """Why ``ground_truth`` cannot be graded (every response would score 0), or None: it must
    hold a finite ``[x1, y1, x2, y2]`` box with x2 > x1 and y2 > y1 (the loader checks this)."""
    if re.search(r"\b(?:nan|inf(?:inity)?)\b", ground_truth, re.IGNORECASE):
        return f"ground truth {ground_truth!r} has a NaN or infinite coordinate"
    box = parse_box(ground_truth)
    if box is None:
        return f"ground truth {ground_truth!r} has no [x1, y1, x2, y2] box"
    x1, y1, x2, y2 = box
    if not (x2 > x1 and y2 > y1):
        return f"ground truth box {list(box)} is empty (needs x2 > x1 and y2 > y1)"
    return None


def grounding_compute_score_unguarded(response: str, ground_truth: str, **record_fields: object) -> dict[str, float]:
    gt = parse_box(ground_truth)
    if gt is None:
        raise ValueError(f"grounding ground truth {ground_truth!r} has no [x1, y1, x2, y2] box")
    resp = normalize_tags(response)
    fmt = 1.0 if format_ok(resp, "thinking") else 0.0
    pred = parse_box(answer_region(resp))
    iou = box_iou(pred, gt) if pred is not None else 0.0
    return {"overall": iou, "format": fmt, "accuracy": iou, "iou": iou}
