"""A run's records by split (what a task's factory returns, ``fastrl.tasks``), and the ``files`` task.

Every record keeps where it came from, ``(file or generated split, row)``, so each check of the
whole (``fastrl.training.setup.load_dataset_splits``) and the prompt-length filter can name it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from fastrl.data.schema import Record


class DataError(ValueError):
    """A dataset named in the config cannot be used; the message names the file or key."""


@dataclass
class Split:
    """A split's records and where each came from: (file, row)."""

    records: list[Record] = field(default_factory=list)
    where: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class TaskSplits:
    """A run's records by split, with where each came from; checked as a whole, no model needed.

    ``own_ood_formats``: each OOD benchmark is prompted and graded in its own benchmark's template
    and reward, known from its records' ``source`` (files: fastrl.evaluation.benchmarks); False:
    every OOD set shares the training template and reward (a generated task's variants)."""

    train: Split
    val: Split
    ood: dict[str, Split]
    own_ood_formats: bool = False


def file_splits(data: Any) -> TaskSplits:
    """The ``files`` task: ``data.train_files``, ``val_files`` and one OOD benchmark per
    ``data.ood_variants`` file (named by its stem). Training records get the release's question id
    (``row_id``: the row over the training files, file after file)."""
    if not data.train_files:
        raise DataError("data.task = files needs data.train_files (paths to canonical parquet/jsonl)")
    train = load_split(data.train_files, "data.train_files")
    for row, r in enumerate(train.records):  # the release's question_id: start offset + row
        r.row_id = row
    val = load_split(data.val_files, "data.val_files")
    ood: dict[str, Split] = {}
    for f in data.ood_variants:
        name = Path(f).stem
        if name in ood:
            raise DataError(f"data.ood_variants: {ood[name].where[0][0]!r} and {f!r} have the same benchmark name "
                            f"{name!r} (the file stem); rename one")
        ood[name] = load_split([f], "data.ood_variants")
    return TaskSplits(train, val, ood, own_ood_formats=True)


def load_split(files: Sequence[str], key: str) -> Split:
    """Every file of a split (an empty file is an error), with no uid twice across them."""
    from fastrl.data.loaders import load_records_report

    split = Split()
    first: dict[str, tuple[str, int]] = {}
    for f in files:
        report = load_records_report(f)
        if not report.records:
            raise DataError(f"{key}: {f!r} has no records (an empty file); fill it or remove it from {key}")
        for rec, row in zip(report.records, report.rows):
            if rec.uid in first:
                f0, row0 = first[rec.uid]
                raise DataError(f"{key}: uid {rec.uid!r} is in {f0!r} row {row0} and in {f!r} row {row}; uids must be "
                                "unique (prompts are cached by uid, so one would be trained on the other's prompt)")
            first[rec.uid] = (f, row)
            split.records.append(rec)
            split.where.append((f, row))
    return split
