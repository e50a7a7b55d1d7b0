"""Small generated rows with the exact hub schema of datasets that have no real offline sample.

They exist so that every ``data_prep`` script runs end to end offline (``make data``, CI): each
writer below produces a local directory laid out like the hub repository (``data/<split>-00000-
of-00001.parquet`` with HF image columns stored as ``{"bytes", "path"}`` structs), which the
script then reads through its ordinary ``--from-local`` path. The rows are synthetic (drawn
diagrams, made-up questions with consistent answers); statistics computed from them describe
only these rows and are labelled ``generated_rows``.
"""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw


def _diagram(seed: int, size: tuple[int, int] = (96, 72), label: str = "") -> bytes:
    """A small PNG: a random triangle, a circle and a label (a stand-in geometry diagram)."""
    rng = random.Random(seed)
    w, h = size
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    pts = [(rng.randint(4, w - 4), rng.randint(4, h - 4)) for _ in range(3)]
    d.polygon(pts, outline="black")
    cx, cy, r = rng.randint(20, w - 20), rng.randint(20, h - 20), rng.randint(5, 15)
    d.ellipse([cx - r, cy - r, cx + r, cy + r], outline="blue")
    if label:
        d.text((2, 2), label, fill="red")
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _hf_image(seed: int, name: str, size: tuple[int, int] = (96, 72), label: str = "") -> dict[str, Any]:
    return {"bytes": _diagram(seed, size, label), "path": name}


def _write(rows: list[dict[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_geometry3k(root: Path, split: str = "train", n: int = 6) -> Path:
    """hiyouga/geometry3k: images (list of image), problem ("<image>..."), answer (option value),
    id, choices, ground_truth (letter)."""
    rows = []
    for i in range(n):
        choices = [str(10 * (i + k + 1)) for k in range(4)]
        letter = "ABCD"[i % 4]
        rows.append({
            "images": [_hf_image(100 + i, f"{i}.png")],
            "problem": f"<image>Find x. Angle A measures {choices['ABCD'.index(letter)]} degrees.",
            "answer": choices["ABCD".index(letter)], "id": i, "choices": choices, "ground_truth": letter,
        })
    return _write(rows, root / "data" / f"{split}-00000-of-00001.parquet")


def write_math12k(root: Path, split: str = "train", n: int = 6) -> Path:
    """hiyouga/math12k: problem, answer (text only)."""
    rows = [{"problem": f"What is ${i} + {i + 1}$?", "answer": str(2 * i + 1)} for i in range(n)]
    rows.append({"problem": "Simplify $\\frac{2}{4}$.", "answer": "\\frac{1}{2}"})
    return _write(rows, root / "data" / f"{split}-00000-of-00001.parquet")


def write_geoqa8k(root: Path, split: str = "train", n: int = 8) -> Path:
    """leonardPKU/GEOQA_R1V_Train_8K: image, problem, solution ("<answer>…</answer>")."""
    answers = ["145°", "2√{3}", "4cm", "60°", "12", "3.5", "8m", "\\frac{1}{2}"]
    rows = []
    for i in range(n):
        a = answers[i % len(answers)]
        rows.append({
            "image": _hf_image(200 + i, f"geoqa_{i}.png"),
            "problem": f"As shown in the figure, AB is the diameter of circle O. Find the requested value #{i}.",
            "solution": f"<answer>{a}</answer>",
        })
    return _write(rows, root / "data" / f"{split}-00000-of-00001.parquet")


def write_mathvista(root: Path, split: str = "testmini", n: int = 8) -> Path:
    """AI4Math/MathVista: pid, question, image (path str), decoded_image, choices, unit, precision,
    answer, question_type (multi_choice|free_form), answer_type, metadata (struct), query."""
    rows = []
    for i in range(n):
        mc = i % 2 == 0
        choices = ["30°", "45°", "60°", "90°"] if mc else None
        answer = choices[i % 4] if mc else (str(i + 3) if i % 3 else f"{i + 0.5:.1f}")
        rows.append({
            "pid": str(i + 1), "question": f"What is the measure of the marked angle in diagram {i}?",
            "image": f"images/{i + 1}.jpg", "decoded_image": _hf_image(300 + i, f"images/{i + 1}.jpg"),
            "choices": choices, "unit": None if mc else "", "precision": None if (mc or i % 3) else 1.0,
            "answer": answer, "question_type": "multi_choice" if mc else "free_form",
            "answer_type": "text" if mc else ("integer" if i % 3 else "float"),
            "metadata": {"category": "math-targeted-vqa", "context": "geometry diagram", "grade": "high school",
                         "img_height": 72, "img_width": 96, "language": "english", "skills": ["geometry reasoning"],
                         "source": "generated", "split": split, "task": "geometry problem solving"},
            "query": f"Hint: ... Question: What is the measure of the marked angle in diagram {i}?",
        })
    return _write(rows, root / "data" / f"{split}-00000-of-00001.parquet")


MATHVERSE_VERSIONS = ("Text Dominant", "Text Lite", "Vision Intensive", "Vision Dominant", "Vision Only")


def write_mathverse(root: Path, n_problems: int = 2) -> tuple[Path, Path]:
    """AI4Math/MathVerse ``testmini`` (5 versions per problem, with image) and
    ``testmini_text_only`` (no image): sample_index, problem_index, problem_version, question,
    image, answer, question_type (multi-choice|free-form), metadata, query_wo, query_cot,
    question_for_eval."""
    rows, text_rows = [], []
    idx = 0
    for p in range(n_problems):
        mc = p % 2 == 0
        full_q = (f"As shown in the figure, triangle ABC has AB = {p + 3}. Find BC.\nChoices:\nA:3\nB:4\nC:5\nD:6"
                  if mc else f"As shown in the figure, the radius is {p + 2}. Find the diameter.")
        answer = "C" if mc else str(2 * (p + 2))
        for v in MATHVERSE_VERSIONS:
            idx += 1
            q = "" if v == "Vision Only" else (full_q if v.startswith("Text") else full_q.split(". ", 1)[-1])
            rows.append({
                "sample_index": str(idx), "problem_index": str(p + 1), "problem_version": v, "question": q,
                "image": _hf_image(400 + idx, f"images_version_1-4/image_{idx}.png"), "answer": answer,
                "question_type": "multi-choice" if mc else "free-form",
                "metadata": {"split": "testmini", "source": "generated", "subject": "Plane Geometry", "subfield": "Length"},
                "query_wo": "Please directly answer the question and provide the correct option letter... " + q,
                "query_cot": "Please first conduct reasoning, and then answer the question... " + q,
                "question_for_eval": q or full_q,
            })
        idx += 1
        text_rows.append({
            "sample_index": str(idx), "problem_index": str(p + 1), "problem_version": "Text Only", "question": full_q,
            "image": None, "answer": answer, "question_type": "multi-choice" if mc else "free-form",
            "metadata": {"split": "testmini_text_only", "source": "generated", "subject": "Plane Geometry", "subfield": "Length"},
            "query_wo": full_q, "query_cot": full_q, "question_for_eval": full_q,
        })
    return _write(rows, root / "testmini.parquet"), _write(text_rows, root / "testmini_text_only.parquet")


def write_wemath(root: Path, split: str = "testmini", n: int = 6) -> Path:
    """We-Math/We-Math: ID, split, knowledge concept, question, option ("A. …; B. …"), answer
    (letter), image_path (image struct), key, question number, knowledge concept description."""
    rows = []
    for i in range(n):
        opts = [f"{i + k}cm" for k in range(1, 5)] + ["No correct answer"]
        letter = "ABCDE"[i % 4]
        rows.append({
            "ID": f"{i + 1}@2steps_{1 + i % 2}", "split": split, "knowledge concept": "Perimeter of rectangles",
            "question": f"As shown in the figure, what is the length of side {i}?",
            "option": "; ".join(f"{'ABCDE'[k]}. {o}" for k, o in enumerate(opts)),
            "answer": letter, "image_path": _hf_image(500 + i, f"{i + 1}.png"), "key": f"{2 + i % 2}steps",
            "question number": i + 1, "knowledge concept description": "A rectangle's perimeter is 2(a + b).",
        })
    return _write(rows, root / "data" / f"{split}-00000-of-00001.parquet")


def write_refcoco(root: Path, split: str = "val", n: int = 6) -> Path:
    """lmms-lab/RefCOCO: question_id, image, question, answer (list of referring expressions),
    segmentation, bbox ([x, y, w, h]), iscrowd, file_name."""
    rows = []
    for i in range(n):
        x, y, w, h = 5.0 + i, 6.0 + 2 * i, 30.0, 20.0 + i
        rows.append({
            "question_id": str(1000 + i), "image": _hf_image(600 + i, f"COCO_train2014_{i:012d}.jpg", size=(128, 96)),
            "question": "Please carefully observe the area circled in the image and come up with a caption for the area.",
            "answer": [f"the shape on the left number {i}", f"left object {i}"],
            "segmentation": [x, y, x + w, y, x + w, y + h, x, y + h], "bbox": [x, y, w, h], "iscrowd": 0,
            "file_name": f"COCO_train2014_{i:012d}.jpg",
        })
    return _write(rows, root / "data" / f"{split}-00000-of-00001.parquet")
