"""``make correlation``: Fig. 5 / App. B.2 measured on the warm-started policy of each setting.

Per (setting, seed): ``runs/correlation/<scale>/<dataset>-<model>/seed<k>/{pairs.csv,summary.json}``
(reused when summary.json exists and policy.json names the warm start the configs now resolve to;
one of another warm start is refused, or set aside with --set-aside-superseded). The collector writes paper_figures/generated/correlation.csv/.md
and the scatter plot fig5_correlation.png.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from experiments import collect as C
from experiments.correlation.gradcorr import CorrelationSettings, read_pairs, run_correlation, sample_records
from experiments.grid import Context
from experiments.spec import RunSpec, load_slots, load_table, slot_entry

TARGET = "correlation"
FIGURE = "fig5_correlation.png"
POPULATIONS = ("same_adv", "same_adv_mixed", "same_adv_zero", "diff_adv")


def settings_for(scale: str, seed: int) -> CorrelationSettings:
    table = load_table(TARGET)
    if scale not in table["scale"]:
        raise ValueError(f"configs/tables/correlation.yaml: no 'scale.{scale}' entry")
    return CorrelationSettings(**table["scale"][scale], seed=seed)


def out_dir(ctx: Context, dataset: str, model: str, seed: int) -> Path:
    return ctx.runs_root / TARGET / ctx.scale / f"{dataset}-{model}" / f"seed{seed}"


def run_config(ctx: Context, dataset: str, model: str, seed: int):
    """The run config whose policy (warm start at mini/smoke, model.path at paper) is measured."""
    from fastrl.config import load_config

    slots = load_slots()
    ds, md = slot_entry(slots, "datasets", dataset, ctx.scale), slot_entry(slots, "models", model, ctx.scale)
    overrides = [*ds.get("overrides", []), *ds.get("budget", []), *md.get("overrides", []), f"trainer.seed={seed}"]
    return load_config("methods/grpo.yaml", overrides, scale=ctx.scale)


def questions(cfg: Any, k: int, seed: int) -> list[Any]:
    if cfg.data.task == "files":
        from fastrl.data.loaders import load_records

        pool = [r for f in cfg.data.train_files for r in load_records(f)]
        return sample_records(pool, k, seed)
    from fastrl.mini.tasks import generate_task

    return generate_task(cfg.data.task, split="train", num=k, seed=cfg.data.seed, variant=cfg.data.variant)


def measure(ctx: Context, dataset: str, model: str, seed: int, *, policy_path: Path | None = None) -> dict[str, Any]:
    """Load the policy (the policy kit, as training builds it, on the HF engine: the gradients
    need the very module that samples), then ``run_correlation`` (see gradcorr). ``policy_path``
    overrides the config's policy (tests pass an untrained tiny model)."""
    from dataclasses import replace

    from fastrl.models.device import resolve_device
    from fastrl.policy import PolicySpec, load_policy_kit
    from fastrl.training.setup import resolve_policy_path

    cfg = run_config(ctx, dataset, model, seed)
    settings = settings_for(ctx.scale, seed)
    path = policy_path if policy_path is not None else resolve_policy_path(cfg)
    spec = replace(PolicySpec.from_config(cfg, path, seed=cfg.trainer.seed), engine="hf")
    kit = load_policy_kit(spec, resolve_device(cfg.model.device))
    records = questions(cfg, settings.questions, seed)

    def score(texts: list[str], recs: list[Any]) -> list[dict[str, float]]:
        return kit.score(texts, recs)[0]

    out = out_dir(ctx, dataset, model, seed)
    summary = run_correlation(kit.model, kit.engine, kit.encode, score, records, settings, pad_id=kit.pad_id,
                              out_dir=out)
    info = {"policy": str(path), "dataset": dataset, "model": model, "scale": ctx.scale, "seed": seed}
    (out / "policy.json").write_text(json.dumps(info, indent=2))
    return summary


def specs(ctx: Context) -> list[RunSpec]:
    return []  # nothing is trained here; the warm start is built (and cached) by measure()


def describe(ctx: Context) -> None:
    """The plan and its estimate (from earlier measurements of the same scale, when there are any)."""
    table = load_table(TARGET)
    todo = [(s["dataset"], s["model"], k) for s in table["settings"] for k in ctx.seeds
            if not (out_dir(ctx, s["dataset"], s["model"], k) / "summary.json").is_file()]
    st = table["scale"][ctx.scale]
    print(f"   correlation: {len(todo)} measurements to make ({st['questions']} questions x n = {st['n']} each)")
    done = list((ctx.runs_root / TARGET / ctx.scale).glob("*/seed*/summary.json"))
    if todo and done:
        secs = [json.loads(p.read_text())["total_seconds"] for p in done]
        print(f"   estimate: {sum(secs) / len(secs) * len(todo) / 60:.0f} min from {len(done)} earlier measurements "
              "(plus the SFT warm start of a setting whose policy is not cached yet)")
    elif todo:
        print("   estimate: no earlier measurement at this scale (each one samples, scores and back-propagates "
              f"{st['questions'] * st['n']} responses)")


def measured_another_policy(ctx: Context, dataset: str, model: str, seed: int) -> str | None:
    """The policy a finished measurement recorded (policy.json) when it is not the one the configs
    now resolve to (a warm start is named by its cache key: a changed SFT recipe is another policy);
    None when it is the same. Resolving builds the warm start when it is not cached yet."""
    from fastrl.training.setup import resolve_policy_path

    recorded = json.loads((out_dir(ctx, dataset, model, seed) / "policy.json").read_text())["policy"]
    current = resolve_policy_path(run_config(ctx, dataset, model, seed))
    return None if Path(recorded).name == Path(current).name else recorded


def _settle_measured(ctx: Context, dataset: str, model: str, seed: int) -> bool:
    """Whether a finished measurement of today's policy is there to reuse; one of another policy is
    refused (RunError) or, with ``--set-aside-superseded``, moved under runs/.superseded/."""
    from experiments.runner import SUPERSEDED_DIR, RunError

    out = out_dir(ctx, dataset, model, seed)
    if not (out / "summary.json").is_file():
        return False
    old = measured_another_policy(ctx, dataset, model, seed)
    if old is None:
        return True
    if not ctx.set_aside_superseded:
        raise RunError(f"{out} measured the policy {old}, not the one the configs now ask for: "
                       f"EXP_FLAGS=--set-aside-superseded moves it under {ctx.runs_root / SUPERSEDED_DIR}/ and measures again")
    dest = ctx.runs_root / SUPERSEDED_DIR / time.strftime("%Y%m%d-%H%M%S") / out.relative_to(ctx.runs_root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    out.rename(dest)
    print(f"   set aside {out} (measured {old}): {dest}", flush=True)
    return False


def post(ctx: Context, runs: list[RunSpec]) -> None:
    for s in load_table(TARGET)["settings"]:
        for seed in ctx.seeds:
            if _settle_measured(ctx, s["dataset"], s["model"], seed):
                print(f"-- correlation {s['dataset']}-{s['model']} seed{seed}: reused", flush=True)
                continue
            print(f"-- correlation {s['dataset']}-{s['model']} seed{seed}", flush=True)
            summary = measure(ctx, s["dataset"], s["model"], seed)
            c = summary["correlation"]["same_adv"]
            print(f"   same-advantage pairs: {int(c['n_pairs'])}, Pearson {c['pearson_r']:.3f}, "
                  f"Spearman {c['spearman_rho']:.3f}", flush=True)


def collect(ctx: Context) -> list[Path]:
    table = load_table(TARGET)
    slots = load_slots()
    rows = C.paper_rows(TARGET, table["paper_table"])
    per_setting: dict[str, list[Path]] = {}
    for s in table["settings"]:
        ds, md = s["dataset"], s["model"]
        dirs = [out_dir(ctx, ds, md, k) for k in ctx.seeds if (out_dir(ctx, ds, md, k) / "summary.json").is_file()]
        if not dirs:
            continue
        per_setting[slots["datasets"][ds]["title"]] = dirs
        summaries = {int(d.name.removeprefix("seed")): json.loads((d / "summary.json").read_text()) for d in dirs}
        dsl, mdl = slot_entry(slots, "datasets", ds, ctx.scale), slot_entry(slots, "models", md, ctx.scale)
        for pop in POPULATIONS:
            for metric in ("pearson_r", "spearman_rho", "n_pairs", "mean_cosine", "mean_jaccard_sim"):
                vals = {k: float(v["correlation"][pop][metric]) for k, v in summaries.items()
                        if v["correlation"][pop][metric] is not None and v["correlation"][pop][metric] == v["correlation"][pop][metric]}
                if not vals:
                    continue
                mean, std = C.mean_std(list(vals.values()))
                rows.append(C.Row(
                    target=TARGET, source="measured", method=pop, dataset=slots["datasets"][ds]["title"],
                    model=slots["models"][md]["title"], metric=metric, value=mean, std=std, unit="",
                    n_seeds=len(vals), seeds=" ".join(map(str, sorted(vals))), scale=ctx.scale,
                    data_used=dsl.get("stand_in", ""), model_used=mdl.get("stand_in", ""),
                    run_dirs=" ".join(str(d) for d in dirs),
                    note={"same_adv": "pairs with equal advantage (the paper's population)",
                          "same_adv_mixed": "same-advantage pairs of questions with mixed rewards (A != 0)",
                          "same_adv_zero": "same-advantage pairs of all-equal-reward questions (A = 0)",
                          "diff_adv": "pairs with different advantages (reference)"}[pop],
                ))
        for k, v in summaries.items():
            for key in ("num_questions", "num_trajectories", "num_parameters", "gradient_dim"):
                rows.append(C.Row(target=TARGET, source="measured", method="policy", dataset=slots["datasets"][ds]["title"],
                                  model=slots["models"][md]["title"], metric=f"{key}", value=float(v[key]), unit="count",
                                  n_seeds=1, seeds=str(k), scale=ctx.scale, data_used=dsl.get("stand_in", ""),
                                  model_used=mdl.get("stand_in", ""), run_dirs=str(out_dir(ctx, ds, md, k))))
    md_text = C.markdown(table["title"], rows, ("pearson_r", "spearman_rho", "n_pairs", "mean_cosine",
                                                 "mean_jaccard_sim", "num_questions", "num_trajectories", "num_parameters",
                                                 "questions_per_dataset", "trajectories"))
    paths = list(C.write_outputs(TARGET, rows, md_text, ctx.out_dir))
    if per_setting:
        paths.append(scatter({k: [p for d in v for p in read_pairs(d / "pairs.csv")] for k, v in per_setting.items()},
                             ctx.out_dir / FIGURE, title=f"Fig. 5 (measured, scale {ctx.scale})"))
    return paths


def scatter(pairs_by_dataset: dict[str, list[Any]], path: Path, *, title: str) -> Path:
    """Gradient cosine vs token Jaccard similarity of same-advantage pairs, one colour per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.correlation.gradcorr import correlate

    fig, axes = plt.subplots(1, len(pairs_by_dataset), figsize=(5 * len(pairs_by_dataset), 4.2), squeeze=False)
    for ax, (name, pairs) in zip(axes[0], pairs_by_dataset.items()):
        same = [p for p in pairs if p.same_adv]
        for mixed, colour, label in ((True, "tab:blue", "A ≠ 0"), (False, "tab:gray", "A = 0")):
            pts = [p for p in same if p.mixed_question == mixed]
            ax.scatter([p.jaccard_sim for p in pts], [p.grad_cosine for p in pts], s=6, alpha=0.5, c=colour,
                       label=f"{label} ({len(pts)} pairs)")
        c = correlate(same)
        ax.set_title(f"{name}\nPearson {c['pearson_r']:.2f}, Spearman {c['spearman_rho']:.2f}")
        ax.set_xlabel("token Jaccard similarity")
        ax.set_ylabel("gradient cosine similarity")
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
