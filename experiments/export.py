"""Run metadata of a target, committed beside its table: ``<scale dir>/run_metadata/<target>.jsonl``
(e.g. ``paper_figures/generated/mini/run_metadata/table1.jsonl``; the scale is the directory's).

``runs/`` (checkpoints, full logs) is not committed; this file is the part of it a reader needs to
check a generated table: one line per finished run with the exact command, the run's identity
(config, overrides, scale), its wall time, the code commit that wrote the table, the run's summary
(the numbers the collector used) and a per-step series of the quantities the figures plot.

``load_records`` reads it back: the grid tables can be collected from it alone
(``python -m experiments.run <target> --from-metadata``), without ``runs/``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any, Protocol, Sequence

from experiments.logs import RunSummary, is_finished, n_changes, read_metrics, read_spec, summarize, train_rows
from experiments.spec import RunSpec, SpecError
from fastrl import metric_keys as K

METADATA_DIR = "run_metadata"  # not "runs/": .gitignore

# Per-step quantities kept in the export (the full metrics.jsonl has ~60 per step).
STEP_KEYS: tuple[str, ...] = (
    K.STEP, K.STEP_TIME, K.timing_key("gen"), K.timing_key("old_log_prob"), K.timing_key("ref"),
    K.timing_key("update_actor"), K.REWARD_MEAN, K.REWARD_ACCURACY, K.ROLLOUT_N, K.ROLLOUT_NUM_PROMPTS,
    K.ROLLOUT_NUM_RESPONSES, K.ROLLOUT_MIXED_GROUPS, K.PRUNE_KEPT, K.PRUNE_KEPT_FRACTION, K.TOKENS_GENERATED,
    K.TOKENS_TRAINED, K.ACTOR_ENTROPY,
    # the released ARS's inputs (f1 = count_mean, f2 = count_max per step) and its period decisions,
    # so experiments.ars_replay can replay the rule exactly from the committed metadata (records
    # written before these keys give f1 from prune/kept only; see ars_replay)
    K.PRUNE_COUNT_MEAN, K.PRUNE_COUNT_MAX, *(K.ars_key(k) for k in ("f1", "f2", "f3", "g1", "progress", "n_next")),
)


def code_commit(repo: Path) -> str:
    """The checked-out commit (with ``-dirty`` when the tree has changes), or ``unknown``."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


# What moves a run's floats besides the code: the same commit gave bitwise-identical runs in separate
# processes here, and different ones on the machine that trained the committed mini tables
# (docs/results.md, Known limits). Recorded so two runs' environments can be compared.
ENVIRONMENT_PACKAGES = ("torch", "transformers", "deepspeed", "numpy", "pillow", "mathruler", "sympy")


def environment() -> dict[str, Any]:
    """Python, the versions of ``ENVIRONMENT_PACKAGES`` and the CPU (model name, AVX-512 or not),
    read without importing any of them."""
    import platform
    from importlib import metadata

    versions: dict[str, str | None] = {}
    for name in ENVIRONMENT_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:  # "key<TAB>: value" lines, one block per core (all alike); platform.processor() forks `uname -p`
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    cpu_info = {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in lines if ":" in ln)}
    cpu, flags = cpu_info.get("model name", "unknown"), cpu_info.get("flags", "")
    return {"python": platform.python_version(), "packages": versions, "cpu": cpu,
            "avx512": "avx512f" in flags.split(), "machine": platform.machine()}


def portable_command(command: str | None) -> str | None:
    """``command`` as anyone can re-run it from the repository root: the measuring machine's
    interpreter path (``/abs/.venv/bin/python``) becomes ``python``; launchers and arguments stay."""
    if not command:
        return command
    argv = shlex.split(command)
    if argv and argv[0].startswith("/") and Path(argv[0]).name.startswith("python"):
        argv[0] = "python"
    return shlex.join(argv)


def current_override(override: str) -> str:
    """``key=value`` under the schema's current key name (``fastrl.training.run_dir.RENAMED_KEYS``)."""
    from fastrl.migrations import RENAMED_KEYS

    key, sep, value = override.partition("=")
    return f"{RENAMED_KEYS.get(key, key)}{sep}{value}" if sep else override


def upgrade_record(record: dict[str, Any]) -> dict[str, Any]:
    """A record written by an earlier version: its overrides and command under the current key
    names, its command portable (``portable_command``). Numbers are left as they were measured."""
    out = dict(record)
    identity = dict(out.get("identity") or {})
    if "overrides" in identity:
        identity["overrides"] = [current_override(o) for o in identity["overrides"]]
        out["identity"] = identity
    if out.get("command"):
        out["command"] = portable_command(shlex.join(current_override(a) for a in shlex.split(out["command"])))
    return out


def run_record(spec: RunSpec, commit: str) -> dict[str, Any]:
    """One finished run as a JSON-able dict (see the module docstring)."""
    s = summarize(spec.run_dir)
    written = read_spec(spec.run_dir) or {}
    rows = read_metrics(spec.run_dir)
    val = [r for r in rows if str(r.get(K.PHASE, "")).startswith(K.PHASE_VAL)]  # val and val_final
    return {
        "target": spec.target, "group": spec.group, "scale": spec.scale, "dataset": spec.dataset, "model": spec.model,
        "variant": spec.variant, "seed": spec.seed, "run_dir": str(spec.run_dir), "identity": spec.identity(),
        "command": portable_command(written.get("command")), "run_wall_s": written.get("run_wall_s"), "labels": spec.labels,
        "trained_at_commit": written.get("code_commit", "unknown"), "collected_at_commit": commit,
        "trained_in": written.get("environment"),  # None for runs launched before it was recorded
        "summary": {"steps": s.steps, "train_time_s": s.train_time_s, "acc_before": s.acc_before,
                    "acc_after": s.acc_after, "ood": s.ood, "tokens_generated": s.tokens_generated,
                    "tokens_trained": s.tokens_trained, "kept_fraction": s.kept_fraction, "mean_n": s.mean_n,
                    "timing_s": s.timing, "train_cpu_s": s.train_cpu_s, "cpu_s": s.cpu},
        "validation": [{k: _round(v) for k, v in r.items() if "accuracy" in k or k in (K.STEP, K.PHASE)} for r in val],
        "steps": [{k: _round(r[k]) for k in STEP_KEYS if k in r} for r in train_rows(rows)],
    }


def _round(value: Any) -> Any:
    """5 significant digits: the export is for reading and plotting, not for bitwise replay."""
    return float(f"{value:.5g}") if isinstance(value, float) else value


def metadata_path(out_dir: Path, target: str) -> Path:
    """``<out_dir>/run_metadata/<target>.jsonl``; ``out_dir`` is one scale's directory."""
    return Path(out_dir) / METADATA_DIR / f"{target}.jsonl"


def export_runs(target: str, specs: Sequence[RunSpec], out_dir: Path, repo: Path,
                kept: dict[RunSpec, dict[str, Any]] | None = None,
                preserved: Sequence[dict[str, Any]] = ()) -> Path | None:
    """Write ``metadata_path(out_dir, target)`` for the finished runs; None when none finished.

    Records written back as they were, beside the runs finished here: ``kept``, the committed
    records reused instead of training (``--keep-committed``, ``committed_settings``), and
    ``preserved``, the committed records of settings this sitting left alone (``--settings``).
    Every spec must be of one scale (the scale directory ``out_dir`` stands for).
    """
    scales = sorted({s.scale for s in specs})
    if len(scales) > 1:
        raise ValueError(f"export_runs({target}): runs of several scales {scales} in one metadata file")
    kept = kept or {}
    done = [s for s in specs if s not in kept and is_finished(s.run_dir)]
    if not done and not kept and not preserved:
        return None
    commit = code_commit(repo)
    records = [run_record(s, commit) for s in done] + list(kept.values()) + list(preserved)
    path = metadata_path(out_dir, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for record in sorted(records, key=lambda r: (r["dataset"], r["model"], r["variant"], int(r["seed"]))):
            fh.write(json.dumps(record, sort_keys=True) + "\n")
    return path


# ------------------------------------------------------------------------------------ reading back
def _identity_without_run_dir(identity: dict[str, Any]) -> dict[str, Any]:
    """A run's identity with the ``trainer.run_dir`` override dropped: it names where the runs
    root was, not what was run."""
    return {**identity, "overrides": [o for o in identity.get("overrides", []) if not o.startswith("trainer.run_dir=")]}


def made_by(record: dict[str, Any], spec: RunSpec) -> bool:
    """Whether ``record`` (a committed record or a run's run_spec.json) was made by the command
    ``spec`` stands for, wherever its runs root was and under whichever key names it was written."""
    found = upgrade_record(record).get("identity") or {}
    return _identity_without_run_dir(found) == _identity_without_run_dir(spec.identity())


def summary_from_record(record: dict[str, Any]) -> RunSummary:
    """The ``RunSummary`` a record was written from (its ``summary`` holds the unrounded numbers)."""
    s = record["summary"]
    return RunSummary(
        run_dir=Path(record["run_dir"]), steps=int(s["steps"]), train_time_s=float(s["train_time_s"]),
        acc_before=None if s.get("acc_before") is None else float(s["acc_before"]), acc_after=float(s["acc_after"]),
        ood={k: float(v) for k, v in (s.get("ood") or {}).items()}, tokens_generated=float(s["tokens_generated"]),
        tokens_trained=float(s["tokens_trained"]), kept_fraction=float(s["kept_fraction"]), mean_n=float(s["mean_n"]),
        timing={k: float(v) for k, v in (s.get("timing_s") or {}).items()},
        train_cpu_s=float(s.get("train_cpu_s", "nan")),
        cpu={k: float(v) for k, v in (s.get("cpu_s") or {}).items()},  # absent in records written before it
        n_changes=_n_changes_of(record),
        spec={"identity": record.get("identity"), "command": record.get("command"),
              "code_commit": record.get("trained_at_commit")},
    )


def _n_changes_of(record: dict[str, Any]) -> float:
    """``n_changes`` from the record's per-step ``rollout/n`` (every record has it, so the
    committed metadata gives the count without re-export); NaN where a step lacks it."""
    ns = [step.get(K.ROLLOUT_N) for step in record.get("steps") or []]
    if not ns or any(n is None for n in ns):
        return float("nan")
    return float(n_changes(ns))


class RunSummaries(Protocol):
    """Where a collector reads finished runs from instead of ``runs/`` (``experiments.collect.gather``)."""

    def summary(self, spec: RunSpec) -> RunSummary | None: ...


class RunRecords:
    """The committed run metadata of one target at one scale, looked up by run (``summary(spec)``)."""

    def __init__(self, records: Sequence[dict[str, Any]], source: Path | str = "<records>") -> None:
        self.source = source
        self._by_key: dict[tuple[str, str, str, str, str, int], dict[str, Any]] = {}
        for r in records:
            key = (r["group"], r["scale"], r["dataset"], r["model"], r["variant"], int(r["seed"]))
            if key in self._by_key:
                raise SpecError(f"{source}: two records of the run {key}")
            self._by_key[key] = r

    def __len__(self) -> int:
        return len(self._by_key)

    def outside(self, settings: set[str]) -> list[dict[str, Any]]:
        """The records of runs in no setting of ``settings`` (``<dataset>-<model>``), as they are."""
        return [r for r in self._by_key.values() if f"{r['dataset']}-{r['model']}" not in settings]

    def seeds(self) -> list[int]:
        """Every seed some record has."""
        return sorted({key[-1] for key in self._by_key})

    @staticmethod
    def key(spec: RunSpec) -> tuple[str, str, str, str, str, int]:
        return (spec.group, spec.scale, spec.dataset, spec.model, spec.variant, int(spec.seed))

    def matching(self, spec: RunSpec) -> dict[str, Any] | None:
        """The record of ``spec``'s run if it was made by the command the configs now ask for; None
        when there is none or another command made it (``--keep-committed`` retrains those)."""
        rec = self._by_key.get(self.key(spec))
        return rec if rec is not None and made_by(rec, spec) else None

    def summary(self, spec: RunSpec) -> RunSummary | None:
        """The recorded summary of ``spec``'s run; None when the metadata has no such run.

        A record made by a different command (config, overrides or scale changed since) is an
        error, never silently mixed into a table.
        """
        rec = self._by_key.get(self.key(spec))
        if rec is None:
            return None
        if not made_by(rec, spec):
            found, expected = _identity_without_run_dir(rec.get("identity") or {}), _identity_without_run_dir(spec.identity())
            raise SpecError(
                f"{self.source}: the recorded run {spec.group}/{spec.scale}/{spec.setting}/{spec.variant}/seed{spec.seed} "
                f"was made by a different command than the configs now ask for:\n  recorded {found}\n  expected "
                f"{expected}\nRetrain it (make {spec.target} SCALE={spec.scale}) or collect at the commit that trained it "
                f"({rec.get('trained_at_commit', 'unknown')}).")
        return summary_from_record(rec)


def load_records(out_dir: Path, target: str) -> RunRecords:
    """The run metadata ``metadata_path(out_dir, target)``; a missing file is an error that says
    what would write it."""
    path = metadata_path(out_dir, target)
    if not path.is_file():
        raise SpecError(f"{path}: no run metadata for {target} here (`make {target}` writes it after training)")
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return RunRecords(lines, source=path)


# ------------------------------------------------------------------------ --keep-committed
def committed_settings(records: RunRecords, specs: Sequence[RunSpec]) -> dict[RunSpec, dict[str, Any]]:
    """The runs ``--keep-committed`` takes from the committed metadata instead of training them, with
    their records: whole settings only, where every run of the setting has a record made by the
    command the configs now ask for and none has a finished run directory here. A setting is never
    part committed, part trained here: its paired comparisons (speedups above all) stay within one
    machine and one session. Lets a re-measure longer than a session be built setting by setting."""
    by_setting: dict[str, list[RunSpec]] = {}
    for s in specs:
        by_setting.setdefault(s.setting, []).append(s)
    kept: dict[RunSpec, dict[str, Any]] = {}
    for group in by_setting.values():
        found = {s: records.matching(s) for s in group}
        if all(r is not None for r in found.values()) and not any(is_finished(s.run_dir) for s in group):
            kept.update(found)  # type: ignore[arg-type]
    return kept


class KeptRuns:
    """Run summaries for collecting a sitting of ``--keep-committed`` / ``--settings``: a finished run
    directory of a selected run here, else the kept committed record (the ``records`` of
    ``experiments.collect.gather``); runs of settings left alone show nothing."""

    def __init__(self, kept: dict[RunSpec, dict[str, Any]], selected: Sequence[RunSpec]) -> None:
        self._by_key = {RunRecords.key(s): r for s, r in kept.items()}
        self._selected = set(selected)

    def summary(self, spec: RunSpec) -> RunSummary | None:
        if spec in self._selected and is_finished(spec.run_dir):
            return summarize(spec.run_dir)
        rec = self._by_key.get(RunRecords.key(spec))
        return None if rec is None else summary_from_record(rec)
