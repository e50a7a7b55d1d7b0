"""Image resizing for Qwen2-VL / Qwen2.5-VL prompts, as ``qwen-vl-utils`` does it.

The paper's (EasyR1's) data pipeline resizes every image with qwen-vl-utils' ``fetch_image``
before the processor sees it: ``smart_resize`` picks the size whose sides are multiples of
``factor = patch_size * merge_size`` (14 * 2 = 28), closest to the original aspect ratio, with
``min_pixels <= h * w <= max_pixels`` (the released config: 262,144 and 4,194,304, i.e. 512² and
2048²), and PIL resizes to it (bicubic, Pillow's default). Each image then costs
``(h / 28) * (w / 28)`` image tokens.

``import qwen_vl_utils`` imports torchvision at module level, which the CPU stack cannot install
beside CPU torch. :func:`smart_resize` is therefore the library's own function when it imports,
and otherwise :func:`smart_resize_reimpl`, a line-by-line re-implementation of
``qwen_vl_utils.vision_process.smart_resize`` (0.0.14): the same rounding (Python's ``round``,
half to even), the same order of the max/min checks, the same aspect-ratio limit.
tests/data/test_vision.py checks the two agree (importing the library with a stand-in for
torchvision) and counts image tokens on the Geometry3K diagrams.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Callable

from PIL import Image

from fastrl.data.images import to_rgb

log = logging.getLogger(__name__)

PATCH_SIZE = 14
MERGE_SIZE = 2
IMAGE_FACTOR = PATCH_SIZE * MERGE_SIZE
RELEASED_MIN_PIXELS = 262144  # 512 * 512
RELEASED_MAX_PIXELS = 4194304  # 2048 * 2048
MAX_RATIO = 200  # qwen-vl-utils refuses more extreme aspect ratios


def _round_by_factor(number: float, factor: int) -> int:
    return round(number / factor) * factor


def _ceil_by_factor(number: float, factor: int) -> int:
    return math.ceil(number / factor) * factor


def _floor_by_factor(number: float, factor: int) -> int:
    return math.floor(number / factor) * factor


def smart_resize_reimpl(height: int, width: int, factor: int = IMAGE_FACTOR, min_pixels: int = RELEASED_MIN_PIXELS,
                        max_pixels: int = RELEASED_MAX_PIXELS) -> tuple[int, int]:
    """``(new_height, new_width)``: multiples of ``factor``, pixel count in [min_pixels, max_pixels],
    aspect ratio kept as closely as possible (qwen-vl-utils' rule, see the module docstring)."""
    if max_pixels < min_pixels:
        raise ValueError(f"smart_resize: max_pixels={max_pixels} < min_pixels={min_pixels}")
    if height < 1 or width < 1:
        raise ValueError(f"smart_resize: image of {width}x{height} pixels")
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(f"smart_resize: aspect ratio {max(height, width) / min(height, width):.1f} of a "
                         f"{width}x{height} image exceeds {MAX_RATIO}")
    h_bar = max(factor, _round_by_factor(height, factor))
    w_bar = max(factor, _round_by_factor(width, factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = _floor_by_factor(height / beta, factor)
        w_bar = _floor_by_factor(width / beta, factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = _ceil_by_factor(height * beta, factor)
        w_bar = _ceil_by_factor(width * beta, factor)
    return h_bar, w_bar


@functools.lru_cache(maxsize=1)
def _library_smart_resize() -> Callable[..., tuple[int, int]] | None:
    try:
        from qwen_vl_utils.vision_process import smart_resize as library
    except Exception as err:  # ImportError without torchvision; a broken torchvision raises others
        log.info("qwen_vl_utils not importable (%s: %s); using fastrl's re-implementation of smart_resize",
                 type(err).__name__, err)
        return None
    return library


def smart_resize(height: int, width: int, *, min_pixels: int, max_pixels: int,
                 factor: int = IMAGE_FACTOR) -> tuple[int, int]:
    """qwen-vl-utils' ``smart_resize`` when importable, else :func:`smart_resize_reimpl`."""
    library = _library_smart_resize()
    if library is None:
        return smart_resize_reimpl(height, width, factor, min_pixels, max_pixels)
    return tuple(library(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels))  # type: ignore[return-value]


def resize_image(image: Image.Image, *, min_pixels: int, max_pixels: int,
                 factor: int = IMAGE_FACTOR) -> Image.Image:
    """The image as ``qwen_vl_utils.fetch_image`` returns it for ``{"image": image, "min_pixels",
    "max_pixels"}``: RGB (transparency on white), resized (Pillow's default, bicubic) to
    :func:`smart_resize`'s size."""
    width, height = image.size
    new_h, new_w = smart_resize(height, width, min_pixels=min_pixels, max_pixels=max_pixels, factor=factor)
    return to_rgb(image).resize((new_w, new_h))


def image_token_count(height: int, width: int, *, patch_size: int = PATCH_SIZE, merge_size: int = MERGE_SIZE) -> int:
    """Image tokens of an image already at a smart-resized size (sides multiples of patch * merge)."""
    factor = patch_size * merge_size
    if height % factor or width % factor:
        raise ValueError(f"image_token_count: {width}x{height} is not a multiple of {factor} on both sides")
    return (height // factor) * (width // factor)
