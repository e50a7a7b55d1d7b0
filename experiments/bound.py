"""Where a method's time goes beyond its token bound, stage by stage, from run metadata or run directories.

    python -m experiments.bound table1 --method fastrl [--scale mini] [--measure cpu~|cpu|wall]
    python -m experiments.bound --runs GRPO_RUN_DIR FASTRL_RUN_DIR --measure cpu

For every setting of the target, averaged over the seeds both the method and the baseline
finished: each stage's measured wall-clock seconds beside its token share (the baseline's same-seed
stage seconds scaled as in ``fastrl.training.token_bound``), the excess, and the efficiency (bound /
measured, a ratio of the seed means), in one of three measures (``--measure``):

- ``wall``: wall-clock seconds (the table's ``bound_efficiency`` is the mean of its per-seed ratios);
- ``cpu``: CPU seconds per stage (``cpu_s/<stage>``), where the runs logged them (run directories;
  metadata collected since the summaries keep ``cpu_s``);
- ``cpu~`` (default): CPU seconds, *estimated* for metadata without per-stage CPU seconds by giving
  each run's CPU seconds to its stages in proportion to their wall-clock seconds. On a
  shared machine a run's wall clock stretches with its neighbours' load, so a wall-clock pair is
  only as fair as the two runs' loads were equal; the run's CPU / wall ratio (printed) says how far
  they differed.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from experiments.collect import generated_dir
from experiments.export import metadata_path
from experiments.logs import summarize
from fastrl.training.token_bound import GENERATED_STAGES, TRAINED_STAGES

TIMED = (*GENERATED_STAGES, *TRAINED_STAGES)
MEASURES = ("cpu~", "cpu", "wall")


@dataclass
class StageGap:
    """One setting of a method against its baseline, averaged over paired seeds, in one measure."""

    setting: tuple[str, str]
    seeds: list[int]
    measured: dict[str, float]  # stage (and "rest": the untimed part of a step) -> seconds
    share: dict[str, float]  # the same stages' token share of the baseline's seconds
    cpu_per_wall: tuple[float, float]  # (method, baseline), mean over seeds

    @property
    def efficiency(self) -> float:
        """Bound / measured time (a ratio of the seed means)."""
        return sum(self.share.values()) / sum(self.measured.values())


def _stages(summary: dict, measure: str) -> dict[str, float]:
    """Stage -> seconds of one run: wall-clock, CPU seconds per stage (``cpu``: needs the summary's
    ``cpu_s``), or (``cpu~``) its CPU seconds given to the stages in proportion to their
    wall-clock seconds."""
    if measure == "cpu":
        if not summary.get("cpu_s"):
            raise ValueError("--measure cpu needs per-stage CPU seconds (summary cpu_s); use cpu~ for older metadata")
        t, factor = summary["cpu_s"], 1.0
    else:
        t = summary["timing_s"]
        factor = summary["train_cpu_s"] / t["step"] if measure == "cpu~" else 1.0
    out = {k: float(t.get(k, 0.0)) * factor for k in TIMED}
    out["rest"] = float(t["step"]) * factor - sum(out.values())
    return out


def stage_gaps(records: list[dict], method: str, baseline: str = "grpo", measure: str = "cpu~") -> list[StageGap]:
    """Per (dataset, model) with paired seeds: ``method``'s stage seconds beside their token share
    (``measure``: one of MEASURES, see the module docstring)."""
    if measure not in MEASURES:
        raise ValueError(f"measure {measure!r}: use one of {MEASURES}")
    by = {(r["dataset"], r["model"], r["variant"], int(r["seed"])): r["summary"] for r in records}
    out: list[StageGap] = []
    for setting in sorted({(d, m) for d, m, v, _ in by if v == method}):
        seeds = sorted(k for d, m, v, k in by if (d, m, v) == (*setting, method) and (*setting, baseline, k) in by)
        if not seeds:
            continue
        measured = {k: 0.0 for k in (*TIMED, "rest")}
        share = dict(measured)
        ratios = [0.0, 0.0]
        for seed in seeds:
            mine, base = by[(*setting, method, seed)], by[(*setting, baseline, seed)]
            gen = mine["tokens_generated"] / base["tokens_generated"]
            trained = mine["tokens_trained"] / base["tokens_trained"]
            m_st, b_st = _stages(mine, measure), _stages(base, measure)
            for stage in measured:
                scale = gen if stage in GENERATED_STAGES else trained if stage in TRAINED_STAGES else 1.0
                measured[stage] += m_st[stage] / len(seeds)
                share[stage] += b_st[stage] * scale / len(seeds)
            for i, run in enumerate((mine, base)):
                ratios[i] += run["train_cpu_s"] / run["timing_s"]["step"] / len(seeds)
        out.append(StageGap(setting, seeds, measured, share, (ratios[0], ratios[1])))
    return out


def report(gaps: list[StageGap], method: str, baseline: str, measure: str) -> str:
    lines = []
    for g in gaps:
        lines.append(f"{g.setting[0]} · {g.setting[1]} ({method} vs {baseline}, seeds {g.seeds}, {measure} seconds): "
                     f"measured {sum(g.measured.values()):.1f}, bound {sum(g.share.values()):.1f}, efficiency "
                     f"{g.efficiency:.2f}; CPU/wall {g.cpu_per_wall[0]:.2f} ({method}) vs {g.cpu_per_wall[1]:.2f} ({baseline})")
        for stage, m in g.measured.items():
            s = g.share[stage]
            if max(abs(m), abs(s)) >= 0.05:
                lines.append(f"    {stage:14s} measured {m:7.2f}   token share {s:7.2f}   excess {m - s:+7.2f}")
    return "\n".join(lines)


def run_records(ref_dir: Path, run_dir: Path) -> list[dict]:
    """Two finished run directories as metadata-like records (``--runs``): the reference as
    "reference", the other as "run", one setting, seed 1."""
    out = []
    for variant, d in (("reference", ref_dir), ("run", run_dir)):
        s = summarize(d)
        out.append({"dataset": "runs", "model": f"{ref_dir} vs {run_dir}", "variant": variant, "seed": 1,
                    "summary": {"timing_s": s.timing, "cpu_s": s.cpu, "train_cpu_s": s.train_cpu_s,
                                "tokens_generated": s.tokens_generated, "tokens_trained": s.tokens_trained}})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.bound", description=__doc__.split("\n\n")[0])
    p.add_argument("target", nargs="?", help="a target with run metadata (e.g. table1)")
    p.add_argument("--method", default="fastrl")
    p.add_argument("--baseline", default="grpo")
    p.add_argument("--scale", default="mini")
    p.add_argument("--measure", choices=MEASURES, default="cpu~")
    p.add_argument("--runs", nargs=2, type=Path, metavar=("REF_DIR", "RUN_DIR"),
                   help="two finished run directories instead of a target's metadata")
    args = p.parse_args(argv)
    if args.runs:
        method, baseline = "run", "reference"
        records = run_records(*args.runs)
    elif args.target:
        method, baseline = args.method, args.baseline
        path = metadata_path(generated_dir(args.scale), args.target)
        records = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    else:
        p.error("name a target or give --runs REF_DIR RUN_DIR")
    print(report(stage_gaps(records, method, baseline, args.measure), method, baseline, args.measure))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
