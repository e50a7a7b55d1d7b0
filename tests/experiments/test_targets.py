"""Targets are registered once, by their YAML (experiments.targets)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import experiments.spec as spec_config
from experiments import run
from experiments.spec import SpecError
from experiments.targets import discover, make_names

REPO = Path(__file__).resolve().parents[2]

NEW_TABLE = """\
target: table9
title: "Table 9 - a new table"
description: "a table added as one YAML file"
register:
  order: 85
  aliases: [my-table]
  from_metadata: true
metrics: [in_domain_acc, train_time_s]
baseline: grpo
settings:
  - {dataset: geometry3k, model: vl_3b}
variants:
  - {name: grpo, config: methods/grpo.yaml}
  - {name: fastrl, config: methods/fastrl.yaml}
"""


@pytest.fixture()
def tables_with_table9(tmp_path, monkeypatch):
    tables = tmp_path / "tables"
    shutil.copytree(spec_config.TABLES_DIR, tables)
    (tables / "table9.yaml").write_text(NEW_TABLE)
    monkeypatch.setattr(spec_config, "TABLES_DIR", tables)
    return tables


def test_a_data_only_table_is_one_yaml_file(tables_with_table9, tmp_path, capsys):
    targets = discover(tables_with_table9)
    assert list(targets).index("table9") == list(targets).index("table8") + 1  # order 85
    assert targets["table9"].hook is None and targets["table9"].from_metadata
    assert run.main(["list"]) == 0
    assert "table9       a table added as one YAML file" in capsys.readouterr().out
    assert run.main(["my-table", "--dry-run", "--scale", "smoke", "--seeds", "1", "--runs-root", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "##### table9: a table added as one YAML file" in out and "2 runs" in out


def test_make_answers_to_every_registered_name():
    out = subprocess.run(["make", "--no-print-directory", "-s", "experiments-names"], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert sorted(out) == sorted([*make_names(discover()), "reproduce"])


@pytest.mark.parametrize("register, match", [
    ("register: {order: 1, color: red}", r"unknown key\(s\) \['color'\]"),
    ("register: {aliases: [x]}", r"register.order must be an integer"),
    ("register: {order: 1, aliases: [table1]}", r"'table1' is already registered"),
])
def test_bad_registrations_name_the_file(tmp_path, register, match):
    shutil.copy(spec_config.TABLES_DIR / "table1.yaml", tmp_path / "table1.yaml")
    (tmp_path / "zzz.yaml").write_text(f"target: zzz\ndescription: d\n{register}\n")
    with pytest.raises(SpecError, match=match):
        discover(tmp_path)


def test_the_reproduce_dry_run_ends_with_the_whole_reproduction_counting_shared_runs_once(tmp_path, capsys):
    import re

    from experiments import run as R

    assert R.main(["reproduce", "--scale", "smoke", "--dry-run", "--runs-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    per_target = [int(n) for n in re.findall(r"^== (?!reproduce)\S+ at scale smoke: (\d+) runs", out, re.M)]
    total = re.findall(r"^== reproduce at scale smoke: (\d+) runs", out, re.M)
    assert out.rstrip().splitlines()[-1].startswith("   (training runs only") and len(total) == 1
    assert re.search(r"^== lr_sweep at scale smoke: [1-9]\d* runs", out, re.M)  # the tuned baseline is part of it
    assert 0 < int(total[0]) < sum(per_target)  # Table 4 and the figures reuse Table 1's runs, ...
