"""Surface features of a question that any router can compute: its length and how many numbers it holds.

Sentence embeddings say what a question is about but barely how long it is, and length is the
cheapest visible sign of difficulty (on the shipped real outcomes, longer HumanEval and arithmetic
items are answered correctly less often: experiments/sim-routing/README.md). :func:`surface_features` gives a
fixed vector of roughly unit scale that the puppeteer policy reads with ``PolicyConfig.surface``.
Its first entry is the simulator's visible difficulty feature
(:func:`puppeteer.backends.sim.difficulty.visible_feature`) divided by 8.
"""

from __future__ import annotations

import math
import re

import numpy as np

from puppeteer.backends.sim.difficulty import visible_feature

SURFACE_NAMES: tuple[str, ...] = (
    "log_chars",  # ln(characters) / 8
    "log_numbers",  # ln(1 + numbers in the text) / 4
    "log_lines",  # ln(1 + lines) / 5
)
N_SURFACE = len(SURFACE_NAMES)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def surface_features(text: str) -> np.ndarray:
    """The question's surface features (float32, ``N_SURFACE`` entries, each about 0 to 1.5)."""
    return np.array(
        [
            visible_feature(text) / 8.0,
            math.log1p(len(_NUMBER.findall(text))) / 4.0,
            math.log1p(text.count("\n") + 1) / 5.0,
        ],
        dtype=np.float32,
    )


__all__ = ["N_SURFACE", "SURFACE_NAMES", "surface_features"]
