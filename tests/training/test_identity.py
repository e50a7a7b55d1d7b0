"""Run identity over what a run uses, and config.yaml migrations between schema versions."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fastrl import migrations as M
from fastrl.config import ConfigError, load_config, save_config
from fastrl.training import identity as I
from fastrl.training.lock import RunDirError

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]
# config.yaml of methods/fastrl.yaml as each earlier schema version wrote it (commit: version).
WRITTEN_BY = {"655ab51": 1, "fb64a13": 2, "61a3373": 3}  # 4: today (written by the tests)


@pytest.mark.parametrize("scale", ["smoke", "paper"])
@pytest.mark.parametrize("commit", sorted(WRITTEN_BY))
def test_a_config_yaml_of_every_earlier_version_is_the_same_run(tmp_path, commit, scale):
    fixture = DATA / f"config_{commit}_fastrl_{scale}.yaml"
    assert M.version_of(M.flatten(yaml.safe_load(fixture.read_text()))) == WRITTEN_BY[commit]
    shutil.copy(fixture, tmp_path / I.CONFIG_FILE)
    I.check_identity(tmp_path, load_config("methods/fastrl.yaml", [f"trainer.run_dir={tmp_path}"], scale=scale))
    with pytest.raises(RunDirError, match=r"algorithm.mdap.tau: 0.8 -> 0.3"):
        I.check_identity(tmp_path, load_config("methods/fastrl.yaml", ["algorithm.mdap.tau=0.3"], scale=scale))


def test_config_yaml_carries_its_schema_version_and_reads_back_as_the_same_config(tmp_path):
    cfg = load_config("methods/fastrl.yaml", ["algorithm.mdap.tau=0.6"], scale="smoke")
    save_config(cfg, tmp_path / "config.yaml")
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())[M.VERSION_KEY] == M.SCHEMA_VERSION
    assert load_config(tmp_path / "config.yaml") == cfg


def test_a_config_of_a_newer_schema_is_one_line(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(f"{M.VERSION_KEY}: {M.SCHEMA_VERSION + 1}\nmethod: grpo\n")
    with pytest.raises(ConfigError, match=rf"{path}: schema_version = {M.SCHEMA_VERSION + 1}.*upgrade fastrl"):
        load_config(path)


def test_a_key_added_to_the_schema_since_is_the_same_run_at_its_default(tmp_path):
    """A config.yaml that lacks a key (the schema gained it later) is the same run when the new
    config holds the key's default, and a different one when it does not."""
    saved = I._as_saved(load_config("methods/fastrl.yaml", [], scale="smoke"))
    del saved["trainer"]["optim"]["eps"]
    (tmp_path / I.CONFIG_FILE).write_text(yaml.safe_dump(saved))
    I.check_identity(tmp_path, load_config("methods/fastrl.yaml", [], scale="smoke"))
    with pytest.raises(RunDirError, match=r"trainer.optim.eps: '<absent>' -> 0.001"):
        I.check_identity(tmp_path, load_config("methods/fastrl.yaml", ["trainer.optim.eps=1e-3"], scale="smoke"))


def test_sections_the_run_does_not_use_are_not_its_identity(tmp_path):
    save_config(load_config("methods/fastrl.yaml", [], scale="smoke"), tmp_path / I.CONFIG_FILE)
    unused = ["algorithm.cppo.prune_rate=0.9", "algorithm.greso.p_easy=0.3", "algorithm.ars_retention.beta=0.9",
              "rollout.vllm.gpu_memory_utilization=0.3", "algorithm.dapo.max_tries=3"]
    I.check_identity(tmp_path, load_config("methods/fastrl.yaml", unused, scale="smoke"))
    with pytest.raises(RunDirError, match=r"algorithm.cppo.prune_rate: 0.5 -> 0.9; algorithm.pruner: 'mdap' -> 'cppo'"):
        I.check_identity(tmp_path, load_config("methods/fastrl.yaml", ["algorithm.pruner=cppo",
                                                                      "algorithm.cppo.prune_rate=0.9"], scale="smoke"))
    with pytest.raises(RunDirError, match=r"algorithm.ars.n_floor"):  # the selected scaler's section is identity
        I.check_identity(tmp_path, load_config("methods/fastrl.yaml", ["algorithm.ars.n_floor=3"], scale="smoke"))


def test_a_new_built_in_section_leaves_old_run_dirs_resumable(tmp_path):
    """A component registered with a new section after the run was written (as a new built-in
    would be) adds algorithm.<section>.* to every config; the old run resumes."""
    module = tmp_path / "new_section.py"
    module.write_text(
        "from dataclasses import dataclass\n"
        "from fastrl.algorithms.registry import PRUNERS, register\n"
        "@dataclass\nclass NewConfig:\n    strength: float = 0.5\n"
        "@register(PRUNERS, 'new_pruner', section='new_section', config=NewConfig)\n"
        "class NewPruner:\n    def __init__(self, config): pass\n")
    code = (
        "import sys; from pathlib import Path\n"
        "from fastrl.config import load_config, save_config\n"
        "from fastrl.training.identity import check_identity\n"
        "run = Path(sys.argv[1])\n"
        "save_config(load_config('methods/fastrl.yaml', [], scale='smoke'), run / 'config.yaml')\n"
        "import new_section\n"
        "cfg = load_config('methods/fastrl.yaml', [], scale='smoke')\n"
        "assert cfg.algorithm.new_section.strength == 0.5\n"
        "check_identity(run, cfg)\n"
        "print('resumable')\n")
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "resumable", out.stderr


def test_new_engine_source_and_task_sections_leave_old_run_dirs_resumable(tmp_path):
    """The same for the other seams: an engine, a model source and a task registered with sections
    after the run was written add rollout.<s>.*, model.<s>.* and data.<s>.* to every config; the
    old run resumes, and a run that does not choose them ignores their values."""
    module = tmp_path / "new_seams.py"
    module.write_text(
        "from dataclasses import dataclass\n"
        "from fastrl.algorithms.registry import register\n"
        "from fastrl.engines import ROLLOUT_ENGINES\n"
        "from fastrl.sources import MODEL_SOURCES\n"
        "from fastrl.tasks import TASKS\n"
        "@dataclass\nclass Knob:\n    level: int = 1\n"
        "register(ROLLOUT_ENGINES, 'new_engine', section='new_engine', config=Knob)(print)\n"
        "register(MODEL_SOURCES, 'new_source', section='new_source', config=Knob)(print)\n"
        "register(TASKS, 'new_task', section='new_task', config=Knob)(print)\n")
    code = (
        "import sys; from pathlib import Path\n"
        "from fastrl.config import load_config, save_config\n"
        "from fastrl.training.identity import check_identity\n"
        "run = Path(sys.argv[1])\n"
        "save_config(load_config('methods/fastrl.yaml', [], scale='smoke'), run / 'config.yaml')\n"
        "import new_seams\n"
        "cfg = load_config('methods/fastrl.yaml', [], scale='smoke')\n"
        "assert (cfg.rollout.new_engine.level, cfg.model.new_source.level, cfg.data.new_task.level) == (1, 1, 1)\n"
        "check_identity(run, cfg)\n"
        "check_identity(run, load_config('methods/fastrl.yaml', ['rollout.new_engine.level=2', "
        "'model.new_source.level=2', 'data.new_task.level=2'], scale='smoke'))\n"
        "print('resumable')\n")
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "resumable", out.stderr


def test_the_chosen_source_section_is_identity(tmp_path):
    save_config(load_config("methods/grpo.yaml", [], scale="smoke"), tmp_path / I.CONFIG_FILE)
    with pytest.raises(RunDirError, match=r"model.tiny.hidden_size: 128 -> 64"):
        I.check_identity(tmp_path, load_config("methods/grpo.yaml", ["model.tiny.hidden_size=64"], scale="smoke"))


def test_every_migration_step_is_registered_once():
    assert sorted(M._MIGRATIONS) == list(range(1, M.SCHEMA_VERSION))
    with pytest.raises(ValueError, match="already registered"):
        M.migration(1)(lambda flat: flat)
