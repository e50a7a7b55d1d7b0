"""Each benchmark's own prompt template and reward, known from its records' ``source`` (the dataset
title ``data_prep`` writes): the pairs of data_prep/README.md ("Rewards and templates that go with
each set") and of configs/tables/slots.yaml's paper-scale OOD entries.

The trainer scores a ``data.ood_variants`` file with these rather than with the training set's
template and reward (a MathVision file asked for a boxed number and graded by ``math`` would
measure nothing). A file whose source is not in the table keeps the training pair, said in one line.
"""

from __future__ import annotations

import logging
from typing import Sequence

from fastrl.data.schema import Record

log = logging.getLogger(__name__)

# source -> (template, reward)
BENCHMARK_FORMATS: dict[str, tuple[str, str]] = {
    "Geometry3K": ("fastrl_math", "math"),
    "MATH": ("fastrl_math", "math"),
    "AIME": ("fastrl_math", "math"),
    "GeoQA8K-R1V": ("fastrl_math", "geoqa"),
    "MathVision": ("fastrl_mc", "mc"),
    "MathVista": ("fastrl_mc", "mc"),
    "MathVerse": ("fastrl_mc", "mc"),
    "WeMath": ("fastrl_mc", "mc"),
    "RefCOCO (grounding)": ("fastrl_grounding", "grounding_iou"),
}


def benchmark_format(name: str, records: Sequence[Record], training: tuple[str, str]) -> tuple[str, str]:
    """(template, reward) of benchmark ``name`` from its records' source; ``training`` (the
    training set's pair) for a source this table does not know. Mixed sources are an error."""
    sources = sorted({r.source for r in records})
    if len(sources) > 1:
        raise ValueError(f"benchmark {name!r}: records come from several sources {sources}; "
                         "split it into one file per benchmark")
    if not sources or sources[0] not in BENCHMARK_FORMATS:
        log.warning("benchmark %r: source %s has no known template/reward; using the training set's %s / %s",
                    name, sources[0] if sources else None, *training)
        return training
    return BENCHMARK_FORMATS[sources[0]]
