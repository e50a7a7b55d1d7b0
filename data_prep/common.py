"""Shared machinery of the ``data_prep`` scripts: locating data, reading hub/local tables,
validating and writing canonical parquet, and dataset statistics (the paper's Table 6).

Every script follows the same shape (see any ``data_prep/<dataset>.py``):

- ``SPEC``: name, hub id, splits.
- ``load_rows(split, from_local)``: raw rows, from the hub (``datasets.load_dataset``) or, with
  ``--from-local DIR``, from a local copy (the hub's parquet/json files, or the original repo's
  own layout where one exists).
- ``to_record(row, split, index)``: one canonical ``Record`` (raises ``ValueError`` naming the field).
- ``offline_runs(shared_dir, scratch_dir)``: what ``data_prep.all`` runs without the hub: the real
  samples in the repository's ``data/`` where they exist, else small generated rows with the hub schema.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from fastrl.data.loaders import write_records
from fastrl.data.schema import IMAGE_PLACEHOLDER, Record

REPO_ROOT = Path(__file__).resolve().parent.parent
REAL_SAMPLE = "real_sample"
GENERATED_ROWS = "generated_rows"


def shared_dir() -> Path:
    """The folder holding ``data/``: the repository itself (its committed ``data/``), or
    ``$FASTRL_SHARED_DIR`` if set (to read another copy of the samples)."""
    env = os.environ.get("FASTRL_SHARED_DIR")
    path = Path(env) if env else REPO_ROOT
    if not path.is_dir():
        raise FileNotFoundError(
            f"FASTRL_SHARED_DIR={path} is not a directory (unset it to use the repository's data/)"
        )
    return path


def shared_data_dir() -> Path:
    """The real samples (MATH-500, AIME 2024/2025, Geometry3K examples, MathVision testmini):
    ``<repo>/data`` by default, ``$FASTRL_SHARED_DIR/data`` if set."""
    path = shared_dir() / "data"
    if not (path / "math500").is_dir():
        raise FileNotFoundError(f"real data samples not found in {path} (expected math500/, aime/, ...; "
                                "unset FASTRL_SHARED_DIR to use the repository's data/)")
    return path


@dataclass(frozen=True)
class DatasetSpec:
    name: str  # file stem of the outputs, e.g. "geometry3k"
    title: str  # as in the paper's tables, e.g. "Geometry3K"
    hub_id: str
    splits: tuple[str, ...]
    hub_config: str | None = None


@dataclass(frozen=True)
class OfflineRun:
    split: str
    local_dir: Path
    input_kind: str  # REAL_SAMPLE | GENERATED_ROWS
    description: str


@dataclass
class PrepResult:
    dataset: str
    title: str
    split: str
    hub_id: str
    input_kind: str
    out_path: Path
    stats: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------
# reading


def _undecoded_image_feature(feat: Any) -> Any | None:
    """The same feature with images left as ``{"bytes", "path"}`` (None if it holds no image)."""
    import datasets

    if isinstance(feat, datasets.Image):
        return datasets.Image(decode=False)
    inner = getattr(feat, "feature", None)
    if inner is not None and isinstance(inner, datasets.Image):
        return type(feat)(datasets.Image(decode=False))
    if isinstance(feat, list) and len(feat) == 1 and isinstance(feat[0], datasets.Image):
        return [datasets.Image(decode=False)]
    return None


def load_hub_rows(hub_id: str, split: str, config: str | None = None) -> Iterator[dict[str, Any]]:
    """Rows of a hub dataset (needs network or a populated HF cache). Image columns are read
    undecoded, so the source's own JPEG/PNG bytes are stored (no lossy re-encode) and rows look
    exactly like the ``--from-local`` parquet rows."""
    import datasets  # heavy import, only on this path

    ds = datasets.load_dataset(hub_id, config, split=split)
    for name, feat in ds.features.items():
        undecoded = _undecoded_image_feature(feat)
        if undecoded is not None:
            ds = ds.cast_column(name, undecoded)
    for row in ds:
        yield dict(row)


def find_local_files(root: Path, split: str, exts: Sequence[str] = (".parquet", ".jsonl", ".json")) -> list[Path]:
    """Files under ``root`` whose name starts with ``split`` followed by a non-letter (``test`` does
    not pick ``testmini``), as in the hub's ``data/<split>-00000-of-00001.parquet`` layout."""
    pat = re.compile(rf"^{re.escape(split)}(?![A-Za-z_])")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in exts and pat.match(p.name))
    if not files:
        raise FileNotFoundError(f"no {'/'.join(exts)} file for split {split!r} under {root}")
    return files


def read_table_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a parquet, jsonl or json (list of objects) file; images stay as stored
    (HF parquet image columns come back as ``{"bytes", "path"}`` dicts)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(path).to_pylist()
    elif path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)
    elif path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
        yield from data
    else:
        raise ValueError(f"{path}: unsupported file type")


def load_local_split(root: Path, split: str) -> Iterator[dict[str, Any]]:
    for path in find_local_files(root, split):
        for row in read_table_rows(path):
            row = dict(row)
            row.setdefault("__file__", str(path))
            yield row


def hf_image(obj: Any, base_dir: Path | None = None) -> Any:
    """An image value as it comes from the hub or a local export, in a form ``encode_image`` takes:
    PIL image, bytes, ``{"bytes", "path"}`` dict, or a path (made absolute against ``base_dir``)."""
    if obj is None:
        raise ValueError("image is missing")
    if isinstance(obj, dict) and obj.get("bytes") is None and obj.get("path") and base_dir is not None:
        p = Path(obj["path"])
        return str(p if p.is_absolute() else base_dir / p)
    if isinstance(obj, str) and base_dir is not None and not Path(obj).is_absolute():
        return str(base_dir / obj)
    return obj


# ----------------------------------------------------------------------------------------------
# text helpers


def require(row: dict[str, Any], key: str) -> Any:
    if key not in row or row[key] is None:
        raise ValueError(f"field {key!r} is missing (row has {sorted(k for k in row if not k.startswith('__'))})")
    return row[key]


def str_answer(value: Any, key: str = "answer") -> str:
    if value is None:
        raise ValueError(f"field {key!r} is missing")
    s = str(value).strip()
    if not s:
        raise ValueError(f"field {key!r} is empty")
    return s


def with_leading_image(problem: str, n_images: int = 1) -> str:
    """Prepend ``n_images`` placeholders to a question that has none (MathVista, MathVerse, WeMath)."""
    if IMAGE_PLACEHOLDER in problem:
        raise ValueError(f"question already has {IMAGE_PLACEHOLDER!r} placeholders: {problem[:80]!r}")
    return IMAGE_PLACEHOLDER * n_images + problem.strip()


LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def letter_to_option(letter: str, choices: Sequence[str], where: str) -> str:
    """The option text a letter (``"C"``, ``"(C)"``) names — Geometry3K/WeMath store letters."""
    key = letter.strip().strip("()").strip().upper()
    if len(key) != 1 or key not in LETTERS[: len(choices)]:
        raise ValueError(f"{where}: answer letter {letter!r} does not name one of {len(choices)} options {list(choices)}")
    return str(choices[LETTERS.index(key)]).strip()


# ----------------------------------------------------------------------------------------------
# statistics (Table 6)

_INT = re.compile(r"^-?\d+$")
_DEC = re.compile(r"^-?\d*\.\d+$")
_BOX = re.compile(r"^\[\s*-?[\d.]+\s*(,\s*-?[\d.]+\s*){3}\]$")


def answer_type(rec: Record) -> str:
    """Coarse type of the answer *value*: box, letter, integer, decimal, expression, text
    (multiple-choice rows are counted separately in ``multiple_choice_rows``)."""
    a = rec.answer.strip()
    if _BOX.match(a):
        return "box"
    if len(a) == 1 and a in LETTERS:
        return "letter"
    if _INT.match(a.replace(",", "")):
        return "integer"
    if _DEC.match(a):
        return "decimal"
    if re.search(r"[\\^_{}=+*/()\[\]√π°]|\d", a):
        return "expression"
    return "text"


def dataset_stats(records: Sequence[Record]) -> dict[str, Any]:
    types = Counter(answer_type(r) for r in records)
    return {
        "rows": len(records),
        "images": sum(len(r.images) for r in records),
        "rows_with_images": sum(1 for r in records if r.images),
        "multiple_choice_rows": sum(1 for r in records if r.choices),
        "answer_types": dict(sorted(types.items())),
        "mean_problem_chars": round(sum(len(r.problem) for r in records) / max(1, len(records)), 1),
    }


# ----------------------------------------------------------------------------------------------
# running one dataset


def convert_rows(
    rows: Iterable[dict[str, Any]], to_record: Callable[[dict[str, Any], str, int], Record], *, dataset: str, split: str,
    limit: int | None = None,
) -> list[Record]:
    out = []
    for i, row in enumerate(rows):
        if limit is not None and i >= limit:
            break
        try:
            out.append(to_record(row, split, i))
        except Exception as e:
            src = row.get("__file__", "hub") if isinstance(row, dict) else "hub"
            raise ValueError(f"{dataset} split {split!r} source row {i} ({src}): {e}") from e
    return out


def prepare_split(
    spec: DatasetSpec, module: Any, split: str, out_dir: Path, *, from_local: Path | None, input_kind: str,
    limit: int | None = None, out_name: str | None = None,
) -> PrepResult:
    """Load, convert, validate and write one split; write ``<name>_<split>.stats.json`` beside it."""
    rows = module.load_rows(split, from_local)
    records = convert_rows(rows, module.to_record, dataset=spec.name, split=split, limit=limit)
    if not records:
        raise ValueError(f"{spec.name} split {split!r}: no rows")
    stem = out_name or f"{spec.name}_{split}"
    out_path = out_dir / f"{stem}.parquet"
    write_records(records, out_path)
    stats = dataset_stats(records)
    stats_doc = {
        "dataset": spec.title, "split": split, "hub_id": spec.hub_id, "input": input_kind,
        "from_local": str(from_local) if from_local else None, **stats,
        "note": ("statistics of the offline samples / generated rows, not of the full dataset"
                 if input_kind != "hub" else "statistics of the full split as loaded from the hub"),
    }
    (out_dir / f"{stem}.stats.json").write_text(json.dumps(stats_doc, indent=2) + "\n", encoding="utf-8")
    return PrepResult(spec.name, spec.title, split, spec.hub_id, input_kind, out_path, stats)


def main_for(spec: DatasetSpec, module: Any, argv: Sequence[str] | None = None) -> list[PrepResult]:
    """The CLI every script shares: ``python -m data_prep.<name> [--from-local DIR] [--split S]
    [--out DIR] [--limit N] [--offline]``."""
    p = argparse.ArgumentParser(prog=f"python -m data_prep.{spec.name}", description=f"Prepare {spec.title} ({spec.hub_id}).")
    p.add_argument("--from-local", type=Path, default=None, help="read a local copy instead of the hub")
    p.add_argument("--split", action="append", default=None, help=f"split(s) to prepare (default: {', '.join(spec.splits)})")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "data" / "prepared")
    p.add_argument("--limit", type=int, default=None, help="first N rows only")
    p.add_argument("--offline", action="store_true", help="run on the offline samples / generated rows (what `make data` does)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    if args.offline:
        scratch = args.out / "_generated_hub_rows" / spec.name
        for run in module.offline_runs(shared_data_dir(), scratch):
            results.append(prepare_split(spec, module, run.split, args.out, from_local=run.local_dir, input_kind=run.input_kind, limit=args.limit))
    else:
        for split in args.split or spec.splits:
            results.append(prepare_split(spec, module, split, args.out, from_local=args.from_local,
                                         input_kind="local" if args.from_local else "hub", limit=args.limit))
    for r in results:
        print(f"{spec.title} {r.split}: {r.stats['rows']} rows, {r.stats['images']} images -> {r.out_path}")
    return results


def run_main(main: Callable[[], Any], prog: str) -> int:
    """What ``python -m data_prep.<name>`` exits with: bad input (a ValueError, a missing file) is
    one line ``<prog>: error: ...`` and code 2, Ctrl-C one line and code 130, never a traceback
    (``FASTRL_DEBUG=1`` adds it)."""
    import sys
    import traceback

    try:
        main()
    except (ValueError, FileNotFoundError) as exc:
        if os.environ.get("FASTRL_DEBUG"):
            traceback.print_exc()
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted (SIGINT)", file=sys.stderr)
        return 130
    return 0
