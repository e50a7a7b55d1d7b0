"""Issue 15, defect 4: free-form rows of the multiple-choice benchmarks are asked for (and graded
on) their answer, not an option letter. MathVision testmini (the repository's data/, 304 real rows) has
113 free-form numeric questions."""

from __future__ import annotations

import re

import pytest

from data_prep import common, mathvision
from data_prep.common import prepare_split
from fastrl.data.loaders import load_records
from fastrl.data.schema import Record, is_multiple_choice
from fastrl.data.templates import FASTRL_INSTRUCTION, MC_INSTRUCTION, build_prompt_text
from fastrl.rewards import score_batch

DATA = common.shared_data_dir()


@pytest.fixture(scope="module")
def mathvision_testmini(tmp_path_factory) -> list[Record]:
    tmp = tmp_path_factory.mktemp("mathvision")
    run = mathvision.offline_runs(DATA, tmp / "scratch")[0]
    res = prepare_split(mathvision.SPEC, mathvision, run.split, tmp, from_local=run.local_dir, input_kind=run.input_kind)
    return load_records(res.out_path, decode_images=False)


def test_mathvision_free_form_rows_get_the_free_form_instruction(mathvision_testmini):
    free = [r for r in mathvision_testmini if not is_multiple_choice(r.choices, r.meta)]
    assert len(mathvision_testmini) == 304 and len(free) == 113
    assert all(re.fullmatch(r"[-\d.,()]+", r.answer) for r in free), "the free-form rows are the numeric ones"
    for r in mathvision_testmini:
        text = build_prompt_text(r, "fastrl_mc")
        if r in free:
            assert MC_INSTRUCTION not in text and "letter" not in text and text.endswith(FASTRL_INSTRUCTION)
        else:
            assert text.endswith(MC_INSTRUCTION)


def test_options_drawn_in_the_image_keep_the_letter_instruction(mathvision_testmini):
    by_id = {r.meta["id"]: r for r in mathvision_testmini}
    assert by_id["6"].meta["options_in_image"] and by_id["6"].choices is None  # options A-E listed as letters
    assert by_id["59"].meta["options_in_image"] and by_id["59"].answer == "C"  # options not even listed
    assert build_prompt_text(by_id["59"], "fastrl_mc").endswith(MC_INSTRUCTION)
    vista_mc = Record(uid="v", problem="<image>Q", answer="B", source="MathVista", images=[b""],
                      meta={"question_type": "multi-choice"})  # MathVerse vision-only: options in the image
    assert build_prompt_text(vista_mc, "fastrl_mc").endswith(MC_INSTRUCTION)


def test_free_form_rows_are_graded_as_the_math_reward(mathvision_testmini):
    free = next(r for r in mathvision_testmini if not is_multiple_choice(r.choices, r.meta))
    fields = {"choices": free.choices, "meta": free.meta, "source": free.source, "uid": free.uid}
    responses = [f"<thinking>t</thinking> \\boxed{{{p}}}" for p in (free.answer, f"{free.answer}.0", "C", f"C. {free.answer}")]
    letter_row = {**fields, "meta": {}}
    mc, _ = score_batch("mc", responses, [free.answer] * 4, [fields] * 4)
    math, _ = score_batch("math", responses, [free.answer] * 4, [fields] * 4)
    assert [s["accuracy"] for s in mc] == [s["accuracy"] for s in math] == [1.0, 1.0, 0.0, 0.0]
    # a free-form answer that looks like a letter is compared as text, not as an option letter
    free_letter, _ = score_batch("mc", [responses[3]], ["C"], [letter_row])
    assert free_letter[0]["accuracy"] == 0.0
    mc_letter, _ = score_batch("mc", [responses[3]], ["C"], [{**letter_row, "meta": {"options_in_image": True}}])
    assert mc_letter[0]["accuracy"] == 1.0
