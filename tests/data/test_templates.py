from __future__ import annotations

import pytest

from fastrl.data.schema import Record
from fastrl.data.templates import TEMPLATE_REWARD, TEMPLATES, build_prompt_text
from fastrl.rewards import REWARD_FUNCTIONS


def _rec(**kw) -> Record:
    base = dict(uid="u", problem="<image>Find x. <image> too", answer="1", source="s", images=[1, 2])
    base.update(kw)
    return Record(**base)


def test_placeholders_kept_in_place():
    for name in TEMPLATES:
        text = build_prompt_text(_rec(choices=["3", "4"]), name)
        assert text.startswith("<image>Find x. <image> too") and text.count("<image>") == 2


def test_template_contents():
    assert "<thinking> </thinking>" in build_prompt_text(_rec(), "fastrl_math") and "\\boxed{}" in build_prompt_text(_rec(), "fastrl_math")
    assert "<think> </think>" in build_prompt_text(_rec(), "easyr1_math")
    mc = build_prompt_text(_rec(choices=["30", "60"]), "fastrl_mc")
    assert "A. 30\nB. 60" in mc and "letter" in mc
    assert "[x1, y1, x2, y2]" in build_prompt_text(_rec(), "fastrl_grounding")


def test_unknown_template_and_reward_pairing():
    with pytest.raises(ValueError, match="unknown prompt template 'x'.*valid"):
        build_prompt_text(_rec(), "x")
    assert set(TEMPLATE_REWARD) == set(TEMPLATES) and set(TEMPLATE_REWARD.values()) <= set(REWARD_FUNCTIONS)
