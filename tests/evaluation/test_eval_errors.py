"""`fastrl eval` on something that is not a model says what it is and what to pass instead, in one
line (issue 16, defect 12): a training checkpoint, a run killed before final/, an unreadable model."""

from __future__ import annotations

import pytest

from fastrl import api
from fastrl.cli import main


@pytest.fixture
def killed_run(tmp_path):
    run = tmp_path / "run"
    step = run / "ckpt" / "step_2"
    step.mkdir(parents=True)
    (step / "trainer_state.pt").write_bytes(b"state")
    (step / "COMPLETE").write_text("")
    (run / "ckpt" / "latest").write_text("step_2")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / "config.yaml").write_text("method: grpo\n")
    return run


def _eval(model, capsys) -> tuple[int, str]:
    rc = main(["eval", "--model", str(model), "--benchmark", "mini-math", "--limit", "1"])
    return rc, capsys.readouterr().err.strip()


def test_eval_on_a_checkpoint_dir_says_it_is_one_and_names_the_run(killed_run, capsys):
    rc, err = _eval(killed_run / "ckpt" / "step_2", capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and "Unrecognized model" not in err
    assert "is a training checkpoint" in err and f"pass the run directory '{killed_run}'" in err


def test_eval_on_a_killed_run_without_final_says_so(killed_run, capsys):
    rc, err = _eval(killed_run, capsys)
    assert rc == 2 and len(err.splitlines()) == 1
    assert "run directory without final/" in err and "resume it" in err


def test_eval_on_a_directory_without_a_model(tmp_path, capsys):
    rc, err = _eval(tmp_path, capsys)
    assert rc == 2 and "without config.json" in err


def test_an_os_error_during_eval_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "config.json").write_text("{}")

    def unreadable(*a, **k):
        raise OSError(f"{tmp_path} does not appear to have a file named model.safetensors\nmore detail")

    monkeypatch.setattr(api, "evaluate", unreadable)
    rc, err = _eval(tmp_path, capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and "model.safetensors" in err and err.startswith("fastrl: error:")


def test_a_run_dir_with_final_resolves_to_final(tmp_path):
    (tmp_path / "final").mkdir()
    assert api.resolve_eval_model(tmp_path) == tmp_path / "final"
    assert api.resolve_eval_model("Qwen/Qwen2.5-VL-7B-Instruct") == "Qwen/Qwen2.5-VL-7B-Instruct"
