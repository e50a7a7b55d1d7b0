"""Rewrite committed run metadata (``paper_figures/generated/<scale>/run_metadata/*.jsonl``) under
the current schema: override keys renamed since the runs were trained (``model.sft_steps`` ->
``model.tiny.sft_steps``, ...) and commands without the measuring machine's interpreter path.

Only spelling changes: every measured number, commit and timestamp stays as it was. Idempotent.

    python dev/upgrade_run_metadata.py [DIR ...]   # default: paper_figures/generated/mini/run_metadata
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.export import upgrade_record  # noqa: E402


def upgrade_file(path: Path) -> int:
    """Rewrite ``path`` in place; returns how many records changed."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    upgraded = [upgrade_record(r) for r in lines]
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in upgraded))
    return sum(a != b for a, b in zip(lines, upgraded))


def main(argv: list[str]) -> int:
    dirs = [Path(a) for a in argv] or [ROOT / "paper_figures/generated/mini/run_metadata"]
    for d in dirs:
        for path in sorted(d.glob("*.jsonl")):
            print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {upgrade_file(path)} records upgraded")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
