"""Image storage for canonical files.

Choice (documented in data_prep/README.md): canonical **parquet** files embed each image as its
encoded bytes (the source's own JPEG/PNG bytes when it provides them, otherwise PNG), so a
prepared file is self-contained and can be moved. **jsonl** files (and parquet files written by
hand) may instead hold paths, resolved relative to the directory of the file. Loaders always
return ``PIL.Image.Image`` in RGB (alpha composited on white: Geometry3K's diagrams are RGBA with
a transparent background that would turn black under a plain ``convert("RGB")``).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from PIL import Image


def encode_image(obj: Any, base_dir: Path | None = None) -> bytes:
    """Encoded image bytes from a PIL image, bytes, a path or an HF ``{"bytes", "path"}`` dict."""
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj)
    if isinstance(obj, dict):
        if obj.get("bytes") is not None:
            return bytes(obj["bytes"])
        if obj.get("path"):
            return encode_image(obj["path"], base_dir)
        raise ValueError(f"image dict has neither bytes nor path: keys {sorted(obj)}")
    if isinstance(obj, (str, Path)):
        path = Path(obj)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        return path.read_bytes()
    if isinstance(obj, Image.Image):
        buf = io.BytesIO()
        fmt = obj.format if obj.format in ("PNG", "JPEG") else "PNG"
        img = obj if fmt == "PNG" or obj.mode in ("RGB", "L") else obj.convert("RGB")
        img.save(buf, format=fmt)
        return buf.getvalue()
    raise TypeError(f"cannot encode an image from {type(obj).__name__}")


def to_rgb(img: Image.Image) -> Image.Image:
    """RGB copy; transparent pixels become white instead of black."""
    if img.mode in ("RGBA", "LA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


def decode_image(obj: Any, base_dir: Path | None = None) -> Image.Image:
    """Open and fully decode an image (raises on a truncated or non-image payload)."""
    if isinstance(obj, Image.Image):
        return to_rgb(obj)
    data = encode_image(obj, base_dir)
    img = Image.open(io.BytesIO(data))
    img.load()  # force decoding now so a corrupt file fails here, not in the model
    return to_rgb(img)
