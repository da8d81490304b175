"""Documents: text of several paragraphs and sentences, translated sentence by sentence and put back together.

A translation model is trained on sentences: a paragraph sent whole is translated worse and cut at the length limit,
and a line break inside a text is lost (the tokenizer reads it as a space). So a document is taken apart (`layout`:
text_layout, by this module's rules), its sentences translated as one batch (`translate_batch`: every option applies),
and put back (`Layout.join`): translate.py.

The rules, each here once:
- A line (up to "\\n", "\\r\\n" or "\\r") is a paragraph; line breaks, blank lines and white-space-only lines are
  kept exactly. A sentence never spans two lines (hard-wrapped prose is translated line by line).
- In a line, the white space it starts and ends with, and a list marker after its leading white space ("- ", "* ",
  "+ ", "• ", "1. ", "12) ": a bullet, or up to 9 digits and "." or ")", then white space) are kept exactly; what
  lies between is split into sentences (split_sentences=True, the default: the sentencex package, the
  `documents` extra) or is one sentence (split_sentences=False). The white space between two sentences is kept
  exactly; each sentence is translated without the white space around it.
- Control characters (C0 but TAB, LF and CR; DEL; C1) are refused (DocumentError, naming the line and column):
  they are no text to translate and would be lost or garbled. So is a line longer than MAX_PARAGRAPH_CHARS
  characters: no paragraph of prose is, and splitting it would hold memory in proportion to it.
Without sentencex installed, split_sentences=True is refused with one line naming the extra (no other rule stands in
for it silently); split_sentences=False needs nothing beyond the runtime.
An HTML document (format="html") is taken apart by html_document.py's rules, which use these for its text.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from ..errors import Seq2OnnxError

EXTRA = "documents"                 # pyproject.toml's extra that brings the sentence splitter
SPLITTER = "sentencex"
MAX_PARAGRAPH_CHARS = 1 << 16       # one line of a document, in characters
DEFAULT_LANGUAGE = "en"             # the splitter's rules when no language is known

_LINE_BREAK = re.compile(r"(\r\n|\r|\n)")
# leading white space, an optional list marker with the white space after it; the content; trailing white space
_LINE = re.compile(r"(\s*(?:(?:[-*+\u2022]|\d{1,9}[.)])\s+)?)(.*?)(\s*)", re.DOTALL)
_CONTROL = re.compile("[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f]")
# white space other than a space or a tab, which the splitter sees as a space: sentencex 1.0.32 panics on some
# lines with a multi-byte space (U+00A0 next to a dot: "end byte index 11 is not a char boundary"); one character
# for one, so the spans it gives are the line's
_WIDE_SPACE = re.compile(r"[^\S \t]")


class DocumentError(Seq2OnnxError, ValueError):
    """A document that cannot be translated as one (a control character, a line too long): the message names
    where, and the fix."""


class Translation(NamedTuple):
    """One sentence's translation as a document layout's join takes it: its text, and for placing markup (HTML)
    its alignment (translate_batch(return_alignment=True)) with the spans of the source words it numbers
    (Translator.source_words); a plain str is a Translation without them."""
    text: str
    alignment: Optional[List[Tuple[int, int]]] = None
    source_words: Optional[List[Optional[Tuple[int, int]]]] = None


def check_controls(text: str, number: int = 1) -> None:
    """DocumentError naming the first control character (C0 but TAB, LF and CR; DEL; C1) of `text`, whose first
    line is line `number`."""
    bad = _CONTROL.search(text)
    if bad:
        line = number + text.count("\n", 0, bad.start())
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        raise DocumentError(f"line {line}, column {column}: control character U+{ord(bad.group()):04X}; a "
                            f"document holds text, tabs and line breaks only: remove it")


def splitter_missing() -> Seq2OnnxError:
    return Seq2OnnxError(f"splitting a document into sentences needs the {SPLITTER} package: pip install "
                         f"'seq2onnx[{EXTRA}]' (or translate each line whole: split_sentences=False, "
                         f"`seq2onnx translate --no-split`)")


Segment = Callable[[str, str], Iterable[str]]   # sentencex.segment(language, text) -> the sentences


def require_splitter() -> Segment:
    """sentencex.segment, or the one-line error naming the extra."""
    try:
        import sentencex
    except ImportError:
        raise splitter_missing() from None
    return sentencex.segment


def splitter_language(code: Optional[str]) -> str:
    """The splitter's language for a model's language code: its first part, lower case ("en", "eng_Latn" -> "eng",
    "pt-BR" -> "pt"); sentencex falls back to its general rules for a code it does not know."""
    if not code:
        return DEFAULT_LANGUAGE
    return re.split(r"[_\-]", code, maxsplit=1)[0].lower() or DEFAULT_LANGUAGE


@dataclasses.dataclass(frozen=True)
class Layout:
    """A document taken apart: its sentences, and the text around them (len(sentences) + 1 pieces), so that
    join(sentences) is the document again and join(translations) its translation."""
    pieces: Tuple[str, ...]
    sentences: Tuple[str, ...]

    def join(self, translations: Sequence[Union[str, Translation]]) -> str:
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        out = [self.pieces[0]]
        for translation, piece in zip(translations, self.pieces[1:]):
            out += [translation if isinstance(translation, str) else translation.text, piece]
        return "".join(out)


def _segment(segment: Segment, language: str, text: str) -> List[str]:
    """The splitter's sentences of one line; a line it fails on is one sentence (a Rust panic of sentencex's is a
    BaseException: anything else, KeyboardInterrupt included, goes on up)."""
    try:
        return list(segment(language, text))
    except BaseException as e:  # noqa: BLE001 - pyo3's PanicException derives from BaseException
        if type(e).__name__ != "PanicException":
            raise
        return [text]


def sentence_spans(text: str, language: str, segment: Segment) -> List[Tuple[int, int]]:
    """(start, end) of each sentence of `text` (one line's content, stripped), without the white space around it.
    The splitter's pieces are found in the text in order, so nothing it might change in them can change the text."""
    spans: List[Tuple[int, int]] = []
    pos = 0
    plain = _WIDE_SPACE.sub(" ", text)
    for piece in _segment(segment, language, plain):
        piece = piece.strip()
        start = plain.find(piece, pos) if piece else -1
        if start < 0:
            continue
        spans.append((start, start + len(piece)))
        pos = start + len(piece)
    if not spans:
        return [(0, len(text))]
    # the text between two pieces the splitter left out (none with sentencex) stays in the sentence before
    spans = [(s, spans[i + 1][0] if i + 1 < len(spans) else len(text)) for i, (s, _) in enumerate(spans)]
    spans[0] = (0, spans[0][1])
    return [(s, s + len(text[s:e].rstrip())) for s, e in spans]


def text_layout(text: str, split_sentences: bool = True, language: Optional[str] = None) -> Layout:
    """A plain-text document taken apart by the module's rules (translate.layout checks the type and the format
    first); language: the source language's code (for the splitter's rules, splitter_language). DocumentError for a
    control character or a line over MAX_PARAGRAPH_CHARS."""
    segment = require_splitter() if split_sentences else None
    lang = splitter_language(language)
    pieces: List[str] = [""]
    sentences: List[str] = []
    parts = _LINE_BREAK.split(text)
    for number, line in enumerate(parts[::2], 1):
        if len(line) > MAX_PARAGRAPH_CHARS:
            raise DocumentError(f"line {number}: {len(line)} characters; a line (a paragraph) of a document may "
                                f"hold at most {MAX_PARAGRAPH_CHARS}: break it into lines")
        check_controls(line, number)
        lead, content, trail = _LINE.fullmatch(line).groups()                        # type: ignore[union-attr]
        pieces[-1] += lead
        if content:
            spans = sentence_spans(content, lang, segment) if segment is not None else [(0, len(content))]
            for i, (start, end) in enumerate(spans):
                if i:
                    pieces[-1] += content[spans[i - 1][1]:start]
                sentences.append(content[start:end])
                pieces.append("")
        pieces[-1] += trail
        if 2 * number - 1 < len(parts):
            pieces[-1] += parts[2 * number - 1]                      # the line break
    return Layout(tuple(pieces), tuple(sentences))
