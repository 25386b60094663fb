"""Model families as the framework profiles name them: a preset's own `family`, else its name's prefix.

Kept apart from frameworks.py so the cost room (cfg_calls) can read a family without importing the profiles.
"""

from __future__ import annotations

from ditpar.plan.inputs.presets import normalize

# model family of each preset, matched on the normalised name's prefix; in-house models are 'custom'
FAMILIES = (("flux", "flux"), ("sd3", "sd3"), ("stablediffusion3", "sd3"), ("pixart", "pixart"),
            ("hunyuandit", "hunyuandit"), ("hunyuanvideo", "hunyuanvideo"), ("cogvideox", "cogvideox"),
            ("consisid", "consisid"), ("latte", "latte"), ("mochi", "mochi"), ("qwenimage", "qwen-image"),
            ("sana", "sana"), ("stepvideo", "step-video"), ("wan", "wan"), ("ltx", "ltx"), ("zimage", "z-image"))


def family_of(model, default: str = "custom") -> str:
    """The model's own `family`, else the family its normalised name starts with, else `default`."""
    own = str(getattr(model, "family", "") or "")
    if own:
        return own
    key = normalize(model.name)
    return next((fam for prefix, fam in FAMILIES if key.startswith(prefix)), default)
