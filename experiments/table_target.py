"""The target of every table whose behaviour is only data (``configs/tables/<target>.yaml``).

Besides the runs (settings x variants, sweeps included; ``experiments.spec``), the table config
says what the table shows:

    description: "..."                   printed before the plan and by `experiments.run list`
    metrics: [in_domain_acc, "ood/*"]    markdown columns in order ("ood/*": every OOD benchmark)
    rename: {ood_avg: aime_avg}          a metric shown under another name
    paired_refs: [grpo, fastrl]          methods compared seed by seed (default: the baseline)
    derived:                             rows computed from the measured rows, in order
      - {kind: difference, name: avg_acc_gain, metric: avg_acc, reference: grpo, methods: [fastrl]}
      - {kind: max_over_models, name: speedup_vs_grpo_max, metric: speedup_vs_grpo, methods: [fastrl]}
      - {kind: best, name: best_in_domain_acc, metric: in_domain_acc}   (the method with the highest mean)
    stand_in_note: "At scale {scale}, ..."   markdown preamble below paper scale

Training, reuse and output are experiments.grid's; at paper scale every finished run is evaluated
on its out-of-domain benchmarks (``paper_ood_evals``) before collection.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from experiments import collect as C
from experiments.grid import Context, collect_grid, paper_ood_evals, specs_for
from experiments.runner import task_available
from experiments.spec import RunSpec, SpecError, load_table, table_config_path

DERIVED_KINDS = ("difference", "max_over_models", "best")


def _difference(rows: list[C.Row], d: dict[str, Any]) -> list[C.Row]:
    """metric(method) - metric(reference) per (dataset, model) (``collect.delta_rows``)."""
    methods = d.get("methods")
    return C.delta_rows(rows, metric=d["metric"], reference=d["reference"], name=d["name"],
                        methods=tuple(methods) if methods is not None else None)


def _max_over_models(rows: list[C.Row], d: dict[str, Any]) -> list[C.Row]:
    """Per method and dataset, the row of ``metric`` with the largest value over model sizes."""
    out: list[C.Row] = []
    for method in d["methods"]:
        found = [r for r in rows if r.method == method and r.metric == d["metric"]]
        for ds in sorted({r.dataset for r in found}):
            best = max((r for r in found if r.dataset == ds), key=lambda r: float(r.value))
            out.append(C.Row(**{**best.__dict__, "model": "", "metric": d["name"],
                                "note": f"max over model sizes (at {best.model})"}))
    return out


def _best(rows: list[C.Row], d: dict[str, Any]) -> list[C.Row]:
    """Per (dataset, model), the method with the highest mean ``metric`` (the lr sweep's best rate):
    its row under the name ``name``, so the table shows it on the winner's line only."""
    out: list[C.Row] = []
    found = [r for r in rows if r.source == "measured" and r.metric == d["metric"] and r.model]
    for ds, md in sorted({(r.dataset, r.model) for r in found}):
        pool = [r for r in found if (r.dataset, r.model) == (ds, md)]
        best = max(pool, key=lambda r: float(r.value))
        out.append(C.Row(**{**best.__dict__, "metric": d["name"],
                            "note": f"the highest mean {d['metric']} of the setting's {len(pool)} methods"}))
    return out


_DERIVE = {"difference": _difference, "max_over_models": _max_over_models, "best": _best}


def derived_rows(rows: list[C.Row], derived: Sequence[dict[str, Any]]) -> list[C.Row]:
    out: list[C.Row] = []
    for d in derived:
        out += _DERIVE[d["kind"]](rows, d)
    return out


def _check_derived(derived: Sequence[dict[str, Any]], where: Path) -> None:
    required = {"difference": ("name", "metric", "reference"), "max_over_models": ("name", "metric", "methods"),
                "best": ("name", "metric")}
    for d in derived:
        if d.get("kind") not in DERIVED_KINDS:
            raise SpecError(f"{where}: derived row {d}: kind must be one of {DERIVED_KINDS}")
        missing = [k for k in required[d["kind"]] if k not in d]
        if missing:
            raise SpecError(f"{where}: derived row {d} lacks {missing}")


@dataclass(frozen=True)
class TableTarget:
    """A data-only table (``configs/tables/<name>.yaml``, parsed once): its runs, post-processing
    and collection, as the ``TargetHooks`` of ``experiments.targets``."""

    name: str
    table: dict[str, Any]

    @classmethod
    def load(cls, name: str, path: Path | None = None) -> "TableTarget":
        table = load_table(name)
        where = path or table_config_path(name)
        if "metrics" not in table:
            raise SpecError(f"{where}: missing key 'metrics'")
        _check_derived(table.get("derived") or [], where)
        return cls(name, table)

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(self.table["metrics"])

    def specs(self, ctx: Context) -> list[RunSpec]:
        return specs_for(self.name, ctx, resolve_paper_steps=ctx.scale == "paper")

    def post(self, ctx: Context, runs: list[RunSpec]) -> None:
        paper_ood_evals(runs, ctx)

    def preamble(self, ctx: Context) -> str:
        """What the markdown says above the table: a missing generated task, else the table's
        ``stand_in_note`` below paper scale."""
        specs = specs_for(self.name, ctx, resolve_paper_steps=False)
        missing = sorted({s.requires_task for s in specs if s.requires_task and not task_available(s.requires_task)})
        if missing:  # a slot that names a generated task this checkout lacks: say so, show the paper only
            return (f"**Not measured at scale {ctx.scale}:** it needs the generated task(s) {', '.join(missing)}, "
                    "which fastrl.mini.tasks does not provide. Only the paper's numbers are shown.")
        note = self.table.get("stand_in_note")
        return str(note).format(scale=ctx.scale) if note and ctx.scale != "paper" else ""

    def collect(self, ctx: Context) -> list[Path]:
        derived = self.table.get("derived") or []
        paired_refs = self.table.get("paired_refs")
        return list(collect_grid(
            self.name, ctx, metrics=self.metrics, rename=self.table.get("rename") or None,
            derive=(lambda rows: derived_rows(rows, derived)) if derived else None,
            preamble=self.preamble(ctx), paired_refs=tuple(paired_refs) if paired_refs is not None else None,
        ))
