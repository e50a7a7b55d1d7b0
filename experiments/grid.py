"""The shared shape of most targets: a grid of (setting, variant, seed) training runs whose
summaries become one table. A table's metrics and derived rows come from its config (the
data-only tables, ``experiments.table_target``) or its ``experiments/<target>/target.py``;
everything else (planning, reuse, paper-scale OOD evaluation, output) is here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from experiments import collect as C
from experiments.evals import evaluate_finished
from experiments.spec import LR_KEY, RunSpec, SpecError, build_runs, load_table, spec_lr, spec_scaler, spec_tau

if TYPE_CHECKING:
    from experiments.export import RunSummaries


@dataclass
class Context:
    """What every target is run with (from the command line / Makefile)."""

    scale: str
    seeds: list[int]
    runs_root: Path
    out_dir: Path  # this scale's directory: paper_figures/generated/<scale>/ (experiments.collect.generated_dir)
    launcher: str
    extra_overrides: tuple[str, ...] = ()
    fail_fast: bool = False
    jobs: int = 1  # runs at once (experiments.runner.default_jobs)
    figures_dir: Path | None = None  # where notebooks write PNGs (default: out_dir)
    # paper scale: read the prepared training files to turn epochs into trainer.total_steps
    # (off for --dry-run and for collecting, which must work without the data)
    resolve_paper_steps: bool = True
    # --from-metadata: run summaries from the committed run metadata instead of runs/ (grid targets)
    records: RunSummaries | None = None
    # --keep-committed: settings fully recorded in the committed run metadata are not retrained
    keep_committed: bool = False
    # --settings: only these settings (<dataset>-<model>); () = all
    settings: tuple[str, ...] = ()
    # --set-aside-superseded: finished runs of another command move under <runs>/.superseded/ and train again
    set_aside_superseded: bool = False
    failures: list[str] = field(default_factory=list)


def specs_for(target: str, ctx: Context, *, resolve_paper_steps: bool = False) -> list[RunSpec]:
    return build_runs(target, ctx.scale, ctx.seeds, ctx.runs_root, extra_overrides=ctx.extra_overrides,
                      resolve_paper_steps=resolve_paper_steps and ctx.resolve_paper_steps)


def paper_ood_evals(specs: Sequence[RunSpec], ctx: Context) -> None:
    """Paper scale: evaluate each finished run on its out-of-domain benchmarks (k = 1), one
    ``fastrl eval`` process per run (its benchmarks share the loaded model), one run at a time."""
    if ctx.scale == "paper":
        evaluate_finished(specs, k=1, subdir="eval", include_in_domain=False, launcher="subprocess")


MetricRename = dict[str, str]
Derive = Callable[[list[C.Row]], list[C.Row]]


def collect_grid(
    target: str,
    ctx: Context,
    *,
    metrics: Sequence[str],
    rename: MetricRename | None = None,
    derive: Derive | None = None,
    extra: Callable[[C.Cell], dict[int, dict[str, float]]] | None = None,
    preamble: str = "",
    paired_refs: Sequence[str] | None = None,
) -> tuple[Path, Path]:
    """Paper rows + measured rows (+ derived rows) -> <out_dir>/<target>.csv and .md.

    ``paired_refs``: methods every variant is compared with seed by seed (``d_*_vs_<ref>``;
    default: the table's baseline). The markdown shows ``metrics``, then the paired columns,
    then every metric the paper gives.
    """
    table = load_table(target)
    if ctx.records is not None and extra is not None:
        raise SpecError(f"{target}: its collector reads evaluation files from the run directories, which the run "
                        "metadata does not hold; collect it from runs/ (without --from-metadata)")
    specs = specs_for(target, ctx, resolve_paper_steps=False)  # run dirs do not depend on total_steps
    measured = C.grid_rows(target, specs, baseline=table.get("baseline"), rename=rename, extra=extra,
                           paired_refs=paired_refs, records=ctx.records)
    if derive is not None:
        measured += derive(measured)
    rows = C.paper_rows(target, table["paper_table"]) + measured
    ood = sorted({r.metric for r in measured if r.metric.startswith("ood/")})
    order = [m for m in metrics if m != "ood/*"]
    if "ood/*" in metrics:
        i = list(metrics).index("ood/*")
        order = [*metrics[:i], *ood, *metrics[i + 1:]]
    # the markdown shows the listed metrics, the paired comparisons and every metric the paper gives;
    # the CSV has them all
    order += paired_order(measured, order, first=table.get("baseline"))
    order += sorted({r.metric for r in rows if r.source == "paper"} - set(order))
    preamble = "\n\n".join(p for p in (lr_header(specs), tau_header(specs), inert_header(measured, specs), preamble) if p)
    md = C.markdown(table["title"], rows, order, preamble=preamble)
    return C.write_outputs(target, rows, md, ctx.out_dir)


def _rate(lr: float) -> str:
    return f"{lr:g}"


def lr_header(specs: Sequence[RunSpec]) -> str:
    """The learning rate the table's runs train at, for its header: one rate for all, else one per
    setting, else (a sweep of the rate) one per method. Where it comes from: slots.yaml ``lr``."""
    if not specs:
        return ""
    per_setting: dict[str, dict[str, float]] = {}
    for s in specs:
        title = f"{s.labels.get('dataset_title', s.dataset)} · {s.labels.get('model_title', s.model)}"
        per_setting.setdefault(title, {})[s.variant] = spec_lr(s)
    head = f"**Learning rate** (`{LR_KEY}`: GRPO's tuned rate per setting, configs/tables/slots.yaml `lr`, else the scale's): "
    rates = {lr for by_variant in per_setting.values() for lr in by_variant.values()}
    if len(rates) == 1:
        return head + f"{_rate(rates.pop())} for every method in every setting."
    if all(len(set(v.values())) == 1 for v in per_setting.values()):
        return head + "; ".join(f"{t} {_rate(next(iter(v.values())))}" for t, v in per_setting.items()) + \
            " (every method of a setting at its rate)."
    methods = {v: lr for by_variant in per_setting.values() for v, lr in by_variant.items()}
    head = f"**Learning rate** (`{LR_KEY}`; the methods set their own): "  # a sweep of the rate
    if all(by_variant == {v: methods[v] for v in by_variant} for by_variant in per_setting.values()):
        return head + "per method, " + ", ".join(f"{v} {_rate(lr)}" for v, lr in methods.items()) + "."
    return head + "; ".join(f"{t}: " + ", ".join(f"{v} {_rate(lr)}" for v, lr in by_variant.items())
                            for t, by_variant in per_setting.items()) + "."


def tau_header(specs: Sequence[RunSpec]) -> str:
    """The MDAP tau the table's MDAP runs prune at, for its header ('' when none prunes with MDAP)."""
    taus = sorted({t for t in (spec_tau(s) for s in specs) if t is not None})
    if not taus:
        return ""
    return (f"**MDAP tau** (`algorithm.mdap.tau`; configs/tables/slots.yaml `mdap_tau` at mini, the paper's 0.8 "
            f"elsewhere): {', '.join(f'{t:g}' for t in taus)}.")


def inert_header(measured: Sequence[C.Row], specs: Sequence[RunSpec]) -> str:
    """Where a mechanism a method runs with never acted, over all of a setting's seeds: a rollout
    scaler that never moved n, or MDAP that kept every response (DESIGN §8: a table where a
    mechanism is inert says so in its header). '' where every one acted."""
    uses: dict[tuple[str, str, str], tuple[str, bool]] = {}
    for s in specs:
        title = (s.labels.get("dataset_title", s.dataset), s.labels.get("model_title", s.model), s.variant)
        uses[title] = (spec_scaler(s), spec_tau(s) is not None)
    inert: dict[str, list[str]] = {}
    for r in measured:
        scaler, mdap = uses.get((r.dataset, r.model, r.method), ("fixed", False))
        if r.metric == "n_changes" and scaler != "fixed" and r.value == 0:
            inert.setdefault(f"{r.method} ({scaler}: n never moved)", []).append(f"{r.dataset} · {r.model}")
        elif r.metric == "kept_fraction" and mdap and r.value == 1:
            inert.setdefault(f"{r.method} (MDAP kept every response)", []).append(f"{r.dataset} · {r.model}")
    if not inert:
        return ""
    return ("**Mechanisms that did not act** (in any seed): "
            + "; ".join(f"{what} on {', '.join(sorted(where))}" for what, where in sorted(inert.items())) + ".")


def paired_order(rows: Sequence[C.Row], already: Sequence[str] = (), first: str | None = None) -> list[str]:
    """The paired metrics present in ``rows`` and not in ``already``, per reference (in the order the
    rows name them, the baseline first): ``d_*`` in PAIRED_METRICS order (renamed ones after), then
    the speedup interval; paired metrics named after no reference (``bound_efficiency``) last."""
    paired = [r.metric for r in rows if r.ci95_low is not None and r.metric not in already]
    present = set(paired)
    rank = {m: i for i, m in enumerate(C.PAIRED_METRICS)}
    refs: dict[str, int] = {first: 0} if first else {}
    split: dict[str, tuple[str, str]] = {}
    for m in paired:
        named = m[2:] if m.startswith("d_") else m[: -len("_ci95")] if m.endswith("_ci95") else ""
        if "_vs_" not in named:
            continue
        split[m] = tuple(named.rsplit("_vs_", 1))  # type: ignore[assignment]
        refs.setdefault(split[m][1], len(refs))

    def key(m: str) -> tuple[int, int, int, str]:
        if m not in split:
            return (len(refs), 2, 0, m)
        base, ref = split[m]
        if m.startswith("d_"):
            return (refs[ref], 0, rank.get(base, len(rank)), base)
        return (refs[ref], 1, 0, m)

    return sorted(present, key=key)
