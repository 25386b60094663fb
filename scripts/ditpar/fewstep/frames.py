"""The quality gate's inputs: one folder per plan, one image or clip per seed, read into frame arrays.

Layout (references/fewstep-validation.md section 11): ``DIR/<plan>/seed<k>.png`` (an image),
``DIR/<plan>/seed<k>.npy`` (frames, shape (T, H, W) or (T, H, W, C)) or ``DIR/<plan>/seed<k>/`` (a folder of
frame PNGs, taken in name order). Every array comes back with a leading frame axis.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass

import numpy as np

from ditpar import files
from ditpar.errors import InputError

SEED = re.compile(r"^seed(\d{1,9})(\.png|\.npy)?$")
MAX_PIXELS = 64 * 1024 * 1024        # per frame; a larger PNG is refused before it is decoded
LAYOUT = "DIR/<plan>/seed<k>.png, DIR/<plan>/seed<k>.npy or DIR/<plan>/seed<k>/ (frame PNGs)"


@dataclass(frozen=True)
class Sample:
    """One generated output: its frames (T, H, W[, C]), the value range's top (255, 65535 or 1.0), the path."""

    frames: np.ndarray
    peak: float
    path: str


def _png(path: str) -> tuple[np.ndarray, float]:
    """One PNG as (H, W) or (H, W, 3) with its peak value; alpha and palettes become RGB."""
    from PIL import Image  # matplotlib's own dependency

    data = files.read_input(path)
    try:
        img = Image.open(io.BytesIO(data), formats=["PNG"])
        if img.size[0] * img.size[1] > MAX_PIXELS:
            raise InputError(f"{path}: {img.size[0]}x{img.size[1]} pixels, over the {MAX_PIXELS} a frame may have")
        if img.mode.startswith("I;16"):
            return np.asarray(img, dtype=np.uint16), 65535.0
        arr = np.asarray(img if img.mode in ("L", "RGB") else img.convert("RGB"))
    except InputError:
        raise
    except Exception as exc:  # PIL raises many kinds on a damaged file (UnidentifiedImageError, OSError, ...)
        raise InputError(f"{path}: not a readable PNG ({type(exc).__name__}: {exc})") from None
    return arr, 255.0


def _npy(path: str) -> tuple[np.ndarray, float]:
    """A .npy of frames (T, H, W[, C]): uint8, uint16, or floats in [0, 1]."""
    data = files.read_input(path)
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:  # truncated header, pickled objects, not an .npy at all
        raise InputError(f"{path}: not a readable .npy array ({type(exc).__name__}: {exc})") from None
    if arr.ndim not in (3, 4) or 0 in arr.shape:
        raise InputError(f"{path}: shape {arr.shape}; expected frames (T, H, W) or (T, H, W, C)")
    if arr.dtype == np.uint8:
        return arr, 255.0
    if arr.dtype == np.uint16:
        return arr, 65535.0
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all() or arr.min() < 0 or arr.max() > 1:
            raise InputError(f"{path}: float frames must be finite and in [0, 1] "
                             f"(found {np.nanmin(arr):g}..{np.nanmax(arr):g}); save uint8 frames instead")
        return arr.astype(np.float64), 1.0
    raise InputError(f"{path}: dtype {arr.dtype}; expected uint8, uint16 or float in [0, 1]")


def _frames_folder(path: str) -> tuple[np.ndarray, float]:
    """A folder of frame PNGs, in name order, stacked."""
    names = sorted(os.listdir(path))
    other = [n for n in names if not n.lower().endswith(".png")]
    if other:
        raise InputError(f"{os.path.join(path, other[0])}: not a frame PNG; a seed folder holds frame PNGs only")
    if not names:
        raise InputError(f"{path}: a seed folder without frame PNGs; expected {LAYOUT}")
    frames = []
    peak = 255.0
    for name in names:
        arr, peak_k = _png(os.path.join(path, name))
        if frames and (arr.shape != frames[0].shape or peak_k != peak):
            raise InputError(f"{os.path.join(path, name)}: frame of shape {arr.shape}, the first frame "
                             f"{names[0]} has {frames[0].shape}")
        frames.append(arr)
        peak = peak_k
    return np.stack(frames), peak


def read_plan(folder: str) -> dict[int, Sample]:
    """seed -> Sample of one plan folder; any other entry is an error naming it."""
    out: dict[int, Sample] = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        m = SEED.match(name)
        is_dir = os.path.isdir(path)
        if not m or (m.group(2) is None) != is_dir:
            raise InputError(f"{path}: not a seed entry; expected {LAYOUT}")
        seed = int(m.group(1))
        if seed in out:
            raise InputError(f"{path}: seed {seed} given twice (also {out[seed].path})")
        if is_dir:
            arr, peak = _frames_folder(path)
        elif m.group(2) == ".png":
            arr, peak = _png(path)
            arr = arr[None]
        else:
            arr, peak = _npy(path)
        if min(arr.shape[1:3]) < 7:
            raise InputError(f"{path}: {arr.shape[1]}x{arr.shape[2]} pixels; SSIM needs at least 7x7")
        out[seed] = Sample(arr, peak, path)
    return out


def read_layout(root: str) -> dict[str, dict[int, Sample]]:
    """plan -> seed -> Sample for every plan folder under root."""
    why = files.input_problem(root, "folder")
    if why:
        raise InputError(why)
    files.register_input(root)
    plans: dict[str, dict[int, Sample]] = {}
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not os.path.isdir(path):
            raise InputError(f"{path}: not a plan folder; expected {LAYOUT}")
        plans[name] = read_plan(path)
    return plans
