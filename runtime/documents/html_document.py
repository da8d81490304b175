"""HTML documents: the text between the tags translated, the markup kept (translate.layout(..., format="html")).

The parser is the standard library's html.parser: no new dependency, maintained with CPython (its security fixes
come with Python's), it never raises on bad markup, and it reports where each tag starts, so what is not translated
is written back as the document spelled it. It tokenizes only; the tree is built here, with the few HTML rules a
translation needs (void elements, a few implied end tags, stray end tags dropped, unclosed elements closed at the
end), so that malformed markup comes back well-formed.

The rules, each here once:
- Block elements (any not in INLINE, and an inline one that holds a block) and <br> separate segments; the text of
  the inline content between them (text, INLINE elements, comments, <img>) is one paragraph, split into sentences as
  a plain-text line is (documents/text.py: sentencex, split_sentences=False: one sentence); in <pre>, each line is.
  The model reads a sentence with its white space runs made one space (as HTML shows them); the white space between
  sentences is written as the document has it.
- An inline element (<b>, <a href>, <i>, <span>, nested ones) that wraps whole sentences is written around their
  translations; one that starts or ends inside a sentence is part of it (the sentences it spans are translated as
  one). Such a tag is put back around the target words its source words align to (return_alignment, Bergamot's
  html.cpp idea): an element spans from the first to the last target word aligned to a source word it holds, within
  its parent's span, after the siblings before it (an element whose words cross a sibling's gets what is left, and
  may end up empty); an element with no aligned word, an <img>, a comment, or a kept element (below) goes after the
  first target word aligned to the source word before it (before the one aligned to the word after it, at the
  start). The white space between two target words is written once, before what opens or stands between them.
  Every tag of the input is written once, in a well-formed document.
- Without alignments (a format_version 1 package has no attention) the stated rule is: a sentence's elements are
  nested around its whole translation, in the order they open, and its other items (an <img>, a kept element) go
  before the translation when they came before its first word, else after it.
- Kept as written, never translated: <script>, <style>, <code>, <kbd>, <samp>, <svg>, <math>, <textarea>, and an
  element with translate="no" (or class "notranslate", Google Translate's), with all they hold. <code> (an inline
  one) stays inside its sentence, where the rule above puts it; the model does not read it.
- Attributes are kept as written, but title and alt, whose values are translated (as plain-text documents).
  Entities in text are decoded for the model and written back as the document spelled them (a character it wrote
  as &nbsp; or &#169; is written so again); "&", "<", ">" are escaped.
- Refused (DocumentError, naming where and the fix): a document over MAX_HTML_CHARS characters or MAX_HTML_TAGS
  "<" (html.parser's time grows with them: microseconds each), elements nested deeper than MAX_HTML_DEPTH (Blink's
  parser stops at 512), a <script> or <style> that is never closed (the rest of the document would be script), a
  control character (as in plain text), and a paragraph's text over MAX_PARAGRAPH_CHARS.
"""
from __future__ import annotations

import bisect
import dataclasses
import re
from html import unescape
from html.parser import HTMLParser
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .text import (MAX_PARAGRAPH_CHARS, DocumentError, Layout, Translation, sentence_spans, check_controls,
                   require_splitter, splitter_language, text_layout)

MAX_HTML_CHARS = 1 << 22            # characters of one HTML document
MAX_HTML_TAGS = 1 << 17             # its "<" (tags, comments, a bare "<"): each one a parser event, of microseconds
MAX_HTML_DEPTH = 256                # elements open at once

VOID = frozenset("area base basefont bgsound br col embed frame hr img input keygen link meta param source track "
                 "wbr".split())
# phrasing elements that stay inside a sentence (<br> is not among them: the text after it is a new line)
INLINE = frozenset("a abbr acronym b bdi bdo big cite code data del dfn em font i img ins kbd label mark q rp rt "
                   "ruby s samp small span strike strong sub sup time tt u var wbr".split())
KEPT = frozenset("script style code kbd samp svg math textarea".split())
RAW_TEXT = frozenset({"script", "style"})             # html.parser hands their content over unparsed
TRANSLATED_ATTRIBUTES = ("title", "alt")
PRE = frozenset({"pre", "listing", "plaintext"})      # white space as written
# a start tag of the key closes the innermost open elements while they have one of these names (HTML's implied ends)
IMPLIED_END = {"p": {"p"}, "li": {"li"}, "dt": {"dt", "dd"}, "dd": {"dt", "dd"}, "tr": {"tr", "td", "th"},
               "td": {"td", "th"}, "th": {"td", "th"}, "option": {"option"}}
_ATTRIBUTE = re.compile(r"""([^\s/>"'=][^\s/>"'=]*)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s>]+))?""")
_SPACE_RUN = re.compile(r"\s+")


class Text:
    __slots__ = ("text", "raw", "line")

    def __init__(self, text: str, raw: str, line: int) -> None:
        self.text, self.raw, self.line = text, raw, line     # decoded; as the document wrote it; where it starts


class Raw:
    """A comment, a declaration, a processing instruction, or a <script>'s content: written as it is."""
    __slots__ = ("raw",)

    def __init__(self, raw: str) -> None:
        self.raw = raw


class Element:
    __slots__ = ("name", "start", "end_name", "children", "closed", "kept", "line", "has_block")

    def __init__(self, name: str, start: str, kept: bool, line: int, closed: bool = False) -> None:
        self.name, self.start, self.kept, self.line, self.closed = name, start, kept, line, closed
        self.end_name = start[1:1 + len(name)] if start[1:1 + len(name)].lower() == name else name
        self.children: List[Node] = []
        self.has_block = False

    @property
    def inline(self) -> bool:
        """Part of a sentence: a phrasing element without a block inside (<img> among them), a KEPT one."""
        return (self.name in INLINE or self.name in KEPT) and not (self.has_block and not self.kept)


Node = Union[Text, Raw, Element]


def _keeps(name: str, attrs: Sequence[Tuple[str, Optional[str]]]) -> bool:
    values = dict(attrs)
    return (name in KEPT or (values.get("translate") or "").strip().lower() == "no"
            or "notranslate" in (values.get("class") or "").split())


class _TreeBuilder(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.text = text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.root = Element("", "", False, 1)
        self.stack: List[Element] = [self.root]
        self.pending: Optional[Tuple[List[Node], int, int]] = None   # the last text: its list, index, start

    def position(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def where(self) -> str:
        line, column = self.getpos()
        return f"line {line}, column {column + 1}"

    def flush(self, end: int) -> None:
        """The raw text of the last data event: the document's characters up to the next event."""
        if self.pending is not None:
            nodes, i, start = self.pending
            node = nodes[i]
            raw = self.text[start:end]
            if isinstance(node, Text) and unescape(raw) == node.text:
                node.raw = raw
            self.pending = None

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        self._start(tag, attrs, closed=False)

    def handle_startendtag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        self._start(tag, attrs, closed=True)

    def _start(self, tag: str, attrs: List[Tuple[str, Optional[str]]], closed: bool) -> None:
        self.flush(self.position())
        top = self.stack[-1]
        while top.name in IMPLIED_END.get(tag, ()) and not top.kept:
            self.stack.pop()
            top = self.stack[-1]
        raw = self.get_starttag_text() or f"<{tag}>"
        closed = closed or tag in VOID
        element = Element(tag, raw, top.kept or _keeps(tag, attrs), self.getpos()[0], closed)
        top.children.append(element)
        if not closed:
            if len(self.stack) > MAX_HTML_DEPTH:
                raise DocumentError(f"{self.where()}: <{tag}> opens an element {len(self.stack)} deep; an HTML "
                                    f"document may nest elements at most {MAX_HTML_DEPTH} deep: flatten it")
            self.stack.append(element)

    def handle_endtag(self, tag: str) -> None:
        self.flush(self.position())
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].name == tag:
                del self.stack[i:]                  # closes the elements left open inside it
                return                              # an end tag with no open element is dropped

    def handle_data(self, data: str) -> None:
        self.flush(self.position())
        top = self.stack[-1]
        if top.name in RAW_TEXT:
            top.children.append(Raw(data))
            return
        top.children.append(Text(data, _escape_text(data), self.getpos()[0]))
        self.pending = (top.children, len(top.children) - 1, self.position())

    def _raw(self, raw: str) -> None:
        self.flush(self.position())
        self.stack[-1].children.append(Raw(raw))

    def handle_comment(self, data: str) -> None:
        self._raw(f"<!--{data}-->")

    def handle_decl(self, decl: str) -> None:
        self._raw(f"<!{decl}>")

    def handle_pi(self, data: str) -> None:
        self._raw(f"<?{data}>")

    def unknown_decl(self, data: str) -> None:
        self._raw(f"<![{data}]]>")

    def finish(self, tail: str) -> Element:
        """The tree, with `tail` (the document's end after its last ">") as text."""
        if tail:
            self.flush(len(self.text) - len(tail))
            top = self.stack[-1]
            if top.name not in RAW_TEXT:
                top.children.append(Text(unescape(tail), tail.replace("<", "&lt;"), self.getpos()[0]))
        self.flush(len(self.text))
        for element in self.stack[1:]:
            if element.name in RAW_TEXT:
                raise DocumentError(f"line {element.line}: <{element.name}> is never closed, so the rest of the "
                                    f"document would be its content: close it with </{element.name}>")
        return self.root


_COMMENT_END = re.compile(r"--!?>")
_SECTION_END = {"cdata": re.compile(r"]\s*]\s*>"), "if": re.compile(r"]\s*>")}
_SECTION = re.compile(r"<!\[\s*([a-zA-Z][-_.a-zA-Z0-9]*)")


def _check_closed(text: str) -> None:
    """DocumentError for a comment or a marked section (<![CDATA[ ...) that is never closed: html.parser would
    search the rest of the document for its end at each "<" after it (quadratic time). Checking the last one of each
    kind is enough: an earlier one ends before its end, or at it."""
    last = text.rfind("<!--")
    if last >= 0 and not _COMMENT_END.search(text, last + 4):
        raise DocumentError(f"line {text.count(chr(10), 0, last) + 1}: a comment (<!--) that is never closed: "
                            f"close it with -->")
    sections = {}
    for m in _SECTION.finditer(text):
        name = m.group(1).lower()
        sections["if" if name in ("if", "else", "endif") else "cdata"] = m.start()
    for kind, start in sections.items():
        if not _SECTION_END[kind].search(text, start + 3):
            raise DocumentError(f"line {text.count(chr(10), 0, start) + 1}: a marked section (<![) that is never "
                                f"closed: close it with {']]>' if kind == 'cdata' else ']>'}")


def _escape_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def parse(text: str) -> Element:
    """The document's tree under a root element with no name; DocumentError for what the module refuses."""
    if len(text) > MAX_HTML_CHARS:
        raise DocumentError(f"{len(text)} characters; an HTML document may hold at most {MAX_HTML_CHARS}: "
                            f"translate it in parts")
    tags = text.count("<")
    if tags > MAX_HTML_TAGS:
        raise DocumentError(f'{tags} tags ("<"); an HTML document may hold at most {MAX_HTML_TAGS}: translate it in '
                            f'parts')
    check_controls(text)
    _check_closed(text)
    builder = _TreeBuilder(text)
    # the text after the last ">" holds no markup (every construct ends with one): html.parser, closed with it,
    # rescans it to the end at each "<" (quadratic); it is text, as html.parser would have it
    head = text.rfind(">") + 1
    try:
        builder.feed(text[:head])
        builder.close()
    except AssertionError as e:                     # Python < 3.13's _markupbase: an unknown "<![keyword"
        raise DocumentError(f"{builder.where()}: markup that cannot be read ({e}): remove it") from None
    root = builder.finish(text[head:])
    _mark_blocks(root)
    return root


def _mark_blocks(root: Element) -> None:
    """Element.has_block for every element: it holds a block element (post-order, without recursion)."""
    todo: List[Tuple[Element, bool]] = [(root, False)]
    while todo:
        element, done = todo.pop()
        if done:
            element.has_block = any(isinstance(c, Element) and (c.has_block or c.name not in INLINE)
                                    for c in element.children)
            continue
        todo.append((element, True))
        todo.extend((c, False) for c in element.children if isinstance(c, Element))


Emit = Callable[[Union[str, "_Tag"]], None]      # writes a piece of output: text, or a start tag to translate


def serialize(node: Node, emit: Emit, tags: Dict[int, "_Tag"]) -> None:
    """A node as the document wrote it (its text's bare "<" escaped, its end tags written, title and alt the
    translated ones of `tags`), without recursion (a subtree may be MAX_HTML_DEPTH deep)."""
    todo: List[Union[Node, str]] = [node]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            emit(item)
        elif isinstance(item, Text):
            emit(item.raw.replace("<", "&lt;"))
        elif isinstance(item, Raw):
            emit(item.raw)
        else:
            start_tag(item, emit, tags)
            if not item.closed and item.name:
                todo.append(f"</{item.end_name}>")
            todo.extend(reversed(item.children))


def start_tag(element: Element, emit: Emit, tags: Dict[int, "_Tag"]) -> None:
    if element.name:
        emit(tags.get(id(element), element.start))


def end_tag(element: Element, emit: Emit) -> None:
    if element.name and not element.closed:
        emit(f"</{element.end_name}>")


# --- the layout -----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class _Item:
    """An inline element or an atom (written as it is: <img>, a comment, a kept element, an element without text)
    inside a unit: its range in the unit's model text (an atom's start == end) and the items it holds."""
    node: Node
    start: int
    end: int
    atom: bool
    children: List["_Item"] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Unit:
    """Sentences translated as one: the index of its model text in HtmlLayout.sentences, and its items."""
    index: int
    items: List[_Item]


@dataclasses.dataclass
class _Tag:
    """A start tag whose title/alt values are translated: each value's span in the tag and its plain-text layout,
    whose sentences start at `first` in HtmlLayout.sentences."""
    element: Element
    values: List[Tuple[int, int, Layout, int]]


def _escaper(entities: Dict[str, str], quote: bool) -> Callable[[str], str]:
    """Text -> HTML: "&", "<", ">" (and '"' in an attribute value) escaped, the characters the document wrote as
    entities written so again."""
    table = {c: e for c, e in entities.items() if c not in "&<>\""}
    table.update({"&": "&amp;", "<": "&lt;", ">": "&gt;", **({'"': "&quot;"} if quote else {})})
    pattern = re.compile("[" + re.escape("".join(table)) + "]")
    return lambda text: pattern.sub(lambda m: table[m.group()], text)


@dataclasses.dataclass(frozen=True)
class HtmlLayout:
    """An HTML document taken apart: the model texts of its sentences, and the parts to write around their
    translations (join)."""
    parts: Tuple[Union[str, _Unit, _Tag], ...]
    sentences: Tuple[str, ...]
    entities: Dict[str, str]                # a character -> the entity the document wrote it as
    tags: Dict[int, _Tag]                   # id(element) -> its start tag with translated attributes

    @property
    def needs_alignment(self) -> bool:
        """Whether a sentence holds tags that its translation's alignment places."""
        return any(isinstance(p, _Unit) and p.items for p in self.parts)

    def join(self, translations: Sequence[Union[str, Translation]]) -> str:
        """The document with each sentence's translation: a str, or a Translation with its alignment (without
        one, the module's rule without alignments places the tags)."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        given = [Translation(t) if isinstance(t, str) else t for t in translations]
        escape, escape_value = _escaper(self.entities, False), _escaper(self.entities, True)
        out: List[str] = []

        def emit(piece: Union[str, _Tag]) -> None:
            if isinstance(piece, str):
                out.append(piece)
                return
            raw, pos = piece.element.start, 0
            for start, end, lay, first in piece.values:
                value = lay.join([t.text for t in given[first:first + len(lay.sentences)]])
                out.extend((raw[pos:start], '"', escape_value(value), '"'))
                pos = end
            out.append(raw[pos:])

        for part in self.parts:
            if isinstance(part, _Unit):
                self._unit(part, given[part.index], escape, emit)
            else:
                emit(part)
        return "".join(out)

    def _unit(self, unit: _Unit, translation: Translation, escape: Callable[[str], str], emit: Emit) -> None:
        text = translation.text.strip()
        if not unit.items:
            emit(escape(text))
            return
        if translation.alignment is None or translation.source_words is None:
            self._around(unit, text, escape, emit)
            return
        words = [m.span() for m in re.finditer(r"\S+", text)]
        tokens: List[Tuple[str, Any]] = []
        _place(unit.items, 0, len(words), _Targets.of(translation, len(words)), tokens)
        pending = None                      # the last word written, whose following white space is not yet
        for kind, what in tokens:
            if kind != "close" and pending is not None:
                if pending + 1 < len(words):
                    emit(escape(text[words[pending][1]:words[pending + 1][0]]))
                pending = None
            if kind == "word":
                emit(escape(text[words[what][0]:words[what][1]]))
                pending = what
            elif kind == "open":
                start_tag(what, emit, self.tags)
            elif kind == "close":
                end_tag(what, emit)
            else:
                serialize(what, emit, self.tags)

    def _around(self, unit: _Unit, text: str, escape: Callable[[str], str], emit: Emit) -> None:
        """The rule without alignments: the elements nested around the whole translation in the order they open,
        the atoms before it (those before the sentence's first word) or after it."""
        model = self.sentences[unit.index]
        first_word = len(model) - len(model.lstrip())
        before: List[Node] = []
        after: List[Node] = []
        chain: List[Element] = []
        todo = list(reversed(unit.items))
        while todo:
            item = todo.pop()
            if item.atom:
                (before if item.start <= first_word else after).append(item.node)
            else:
                chain.append(item.node)                                     # type: ignore[arg-type]
                todo.extend(reversed(item.children))
        for node in before:
            serialize(node, emit, self.tags)
        for element in chain:
            start_tag(element, emit, self.tags)
        emit(escape(text))
        for element in reversed(chain):
            end_tag(element, emit)
        for node in after:
            serialize(node, emit, self.tags)


@dataclasses.dataclass
class _Targets:
    """A unit's alignment: its source words (their spans in the model text, in order) with the target words
    aligned to each."""
    spans: List[Tuple[int, int]]
    targets: List[List[int]]

    @classmethod
    def of(cls, translation: Translation, n_words: int) -> "_Targets":
        spans = translation.source_words or []
        by_word: Dict[int, set] = {}
        for s, t in translation.alignment or []:
            if 0 <= s < len(spans) and spans[s] is not None and n_words:
                by_word.setdefault(s, set()).add(min(max(t, 0), n_words - 1))   # a target word past the words
        words = sorted((span, sorted(ts)) for s, ts in by_word.items()          # the text's is its last
                       if (span := spans[s]) is not None)
        return cls([w for w, _ in words], [ts for _, ts in words])

    def of_range(self, start: int, end: int) -> List[int]:
        """Target words aligned to a source word that overlaps [start, end)."""
        return [t for (s, e), ts in zip(self.spans, self.targets) if s < end and e > start for t in ts]

    def anchor(self, position: int) -> int:
        """Where an item at `position` of the source goes: after the first target word aligned to the source word
        before it, else before the one aligned to the word after it, else at the start."""
        before = [ts for (s, _), ts in zip(self.spans, self.targets) if s < position]
        if before:
            return before[-1][0] + 1
        return self.targets[0][0] if self.targets else 0


def _place(items: List[_Item], low: int, high: int, targets: _Targets, tokens: List[Tuple[str, Any]]) -> None:
    """Tokens ("word", k), ("open" | "close", element), ("atom", node) for items within target words [low, high):
    each item from the first to the last word aligned to its source words, after the siblings placed before it."""
    placed = []
    for order, item in enumerate(items):
        words = [] if item.atom else targets.of_range(item.start, item.end)
        start, end = (min(words), max(words) + 1) if words else (targets.anchor(item.start),) * 2
        start = min(max(start, low), high)
        placed.append((start, order, min(max(end, start), high), item))
    placed.sort(key=lambda p: (p[0], p[1]))
    cursor = low
    for start, _, end, item in placed:
        start = max(start, cursor)
        end = max(end, start)
        tokens += [("word", k) for k in range(cursor, start)]
        if item.atom:
            tokens.append(("atom", item.node))
        else:
            tokens.append(("open", item.node))
            _place(item.children, start, end, targets, tokens)
            tokens.append(("close", item.node))
        cursor = end
    tokens += [("word", k) for k in range(cursor, high)]


_NON_SPACE = re.compile(r"\S")
Token = Tuple[str, Any, int]            # ("text" | "open" | "close" | "atom", node, position in the paragraph's text)


class _Builder:
    """Walks the tree and writes the layout's parts; collects the sentences."""

    def __init__(self, split_sentences: bool, language: Optional[str]) -> None:
        self.segment = require_splitter() if split_sentences else None
        self.split_sentences, self.language = split_sentences, language
        self.lang = splitter_language(language)
        self.parts: List[Union[str, _Unit, _Tag]] = []
        self.text: List[str] = []                       # output not yet a part
        self.sentences: List[str] = []
        self.entities: Dict[str, str] = {}
        self.tags: Dict[int, _Tag] = {}

    def emit(self, piece: Union[str, _Unit, _Tag]) -> None:
        if isinstance(piece, str):
            self.text.append(piece)
            return
        if self.text:
            self.parts.append("".join(self.text))
            self.text = []
        self.parts.append(piece)

    def done(self) -> HtmlLayout:
        self.emit(_Unit(-1, []))
        return HtmlLayout(tuple(self.parts[:-1]), tuple(self.sentences), self.entities, self.tags)

    def attributes(self, root: Element) -> None:
        """The title and alt values of every element not kept: their sentences, and the tag to write them in."""
        todo = [root]
        while todo:
            element = todo.pop()
            todo.extend(c for c in reversed(element.children) if isinstance(c, Element) and not c.kept)
            values = []
            for m in _ATTRIBUTE.finditer(element.start, 1 + len(element.name), max(len(element.start) - 1, 0)):
                if m.group(1).lower() in TRANSLATED_ATTRIBUTES and m.group(2):
                    raw = m.group(2)
                    value = unescape(raw[1:-1] if raw[0] in "\"'" else raw)
                    if value.strip():
                        lay = text_layout(value, self.split_sentences, self.language)
                        values.append((m.start(2), m.end(2), lay, len(self.sentences)))
                        self.sentences += lay.sentences
            if values:
                self.tags[id(element)] = _Tag(element, values)

    def block(self, root: Element) -> None:
        """The root and the elements that hold blocks and paragraphs (<body>, <p>, <div>, <li> ...): their tags,
        their blocks, and the runs of inline content between them as paragraphs (without recursion)."""
        todo: List[Tuple[str, Any, bool]] = [("element", root, False)]
        while todo:
            kind, what, pre = todo.pop()
            if kind == "end":
                end_tag(what, self.emit)
            elif kind == "run":
                self.paragraph(what, pre)
            elif what.kept:
                serialize(what, self.emit, self.tags)
            else:
                start_tag(what, self.emit, self.tags)
                pre = pre or what.name in PRE
                todo.append(("end", what, pre))
                groups: List[Tuple[str, Any, bool]] = []
                for child in what.children:
                    if isinstance(child, Element) and not child.inline:
                        groups.append(("element", child, pre))
                    elif groups and groups[-1][0] == "run":
                        groups[-1][1].append(child)
                    else:
                        groups.append(("run", [child], pre))
                todo.extend(reversed(groups))

    def paragraph(self, nodes: List[Node], pre: bool) -> None:
        """Inline content between blocks: its sentences, and the markup around and inside them."""
        tokens: List[Token] = []
        plain: List[str] = []
        size = 0
        todo: List[Tuple[Node, bool]] = [(n, False) for n in reversed(nodes)]
        while todo:
            node, closing = todo.pop()
            if closing:
                tokens.append(("close", node, size))
            elif isinstance(node, Text):
                tokens.append(("text", node, size))
                plain.append(node.text)
                size += len(node.text)
                self._entities(node)
            elif isinstance(node, Raw) or node.kept or node.closed or not _has_text(node):
                tokens.append(("atom", node, size))
            else:
                tokens.append(("open", node, size))
                todo.append((node, True))
                todo.extend((c, False) for c in reversed(node.children))
        text = "".join(plain)
        if len(text) > MAX_PARAGRAPH_CHARS:
            line = next(t[1].line for t in tokens if t[0] == "text")
            raise DocumentError(f"the paragraph at line {line}: {len(text)} "
                                f"characters of text; a paragraph of a document may hold at most "
                                f"{MAX_PARAGRAPH_CHARS}: break it into paragraphs")
        units = _units(self._sentences(text, pre), tokens, text)
        inside = {id(t[1]) for _, _, inner in units for t in inner}
        ends = [e for _, e, _ in units]
        written = -1                                    # the last unit written
        for kind, node, pos in tokens:
            if kind != "text":
                if id(node) not in inside:
                    self._write(kind, node)
                continue
            end = pos + len(node.text)
            i = bisect.bisect_right(ends, pos)
            if i == len(units) or units[i][0] >= end:
                self._write(kind, node)                  # no sentence in it: as written
                continue
            cut = pos
            while cut < end:
                i = bisect.bisect_right(ends, cut)
                if i < len(units) and units[i][0] < end:
                    start, stop, inner = units[i]
                    if cut < start:
                        self.emit(self._gap(text[cut:start]))
                    if i > written:
                        self._unit(text[start:stop], start, inner)
                        written = i
                    cut = max(min(stop, end), start)
                else:
                    self.emit(self._gap(text[cut:end]))
                    cut = end

    def _entities(self, node: Text) -> None:
        if "&" in node.raw:
            for m in re.finditer(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);", node.raw):
                char = unescape(m.group())
                if len(char) == 1 and char != m.group():
                    self.entities.setdefault(char, m.group())

    def _gap(self, text: str) -> str:
        return _escaper(self.entities, False)(text)

    def _sentences(self, text: str, pre: bool) -> List[Tuple[int, int]]:
        """(start, end) in the paragraph's text of each sentence, without white space around it; in <pre>, within
        a line."""
        out: List[Tuple[int, int]] = []
        for line in (re.finditer(r"[^\n]+", text) if pre else [re.match(r"(?s).*", text)]):
            chunk = line.group()                                        # type: ignore[union-attr]
            first = _NON_SPACE.search(chunk)
            if first is None:
                continue
            content = chunk[first.start():].rstrip()
            base = line.start() + first.start()                         # type: ignore[union-attr]
            if self.segment is None:
                spans = [(0, len(content))]
            else:
                spans = sentence_spans(_SPACE_RUN.sub(lambda m: " " * len(m.group()), content), self.lang,
                                        self.segment)
            out += [(base + s, base + e) for s, e in spans]
        return out

    def _write(self, kind: str, node: Node) -> None:
        if kind == "text":
            self.emit(node.raw.replace("<", "&lt;"))                    # type: ignore[union-attr]
        elif kind == "open":
            start_tag(node, self.emit, self.tags)                       # type: ignore[arg-type]
        elif kind == "close":
            end_tag(node, self.emit)                                    # type: ignore[arg-type]
        else:
            serialize(node, self.emit, self.tags)

    def _unit(self, text: str, offset: int, tokens: List[Token]) -> None:
        """A unit's model text (its white space runs one space) and its items, positioned in it."""
        starts: List[int] = []              # for each character of `text`, its position in the model text
        model: List[str] = []
        for m in re.finditer(r"\s+|\S+", text):
            if m.group()[0].isspace():
                starts += [len(model)] * len(m.group())
                model.append(" ")
            else:
                starts += range(len(model), len(model) + len(m.group()))
                model += m.group()
        stack: List[_Item] = []
        items: List[_Item] = []
        for kind, node, pos in tokens:
            at = starts[pos - offset] if pos - offset < len(starts) else len(model)
            if kind == "close":
                stack.pop().end = at
                continue
            item = _Item(node, at, at, kind == "atom")
            (stack[-1].children if stack else items).append(item)
            if kind == "open":
                stack.append(item)
        self.emit(_Unit(len(self.sentences), items))
        self.sentences.append("".join(model))


def _has_text(element: Element) -> bool:
    """Whether an element holds text other than white space (else it is written as it is, an atom)."""
    todo: List[Node] = list(element.children)
    while todo:
        node = todo.pop()
        if isinstance(node, Text) and node.text.strip():
            return True
        if isinstance(node, Element) and not node.kept and not node.closed:
            todo.extend(node.children)
    return False


def _units(sentences: List[Tuple[int, int]], tokens: List[Token], text: str) -> List[Tuple[int, int, List[Token]]]:
    """The units of a paragraph: (start, end, tokens inside) of sentences joined where an element starts or ends
    inside one and spans several, or wraps sentences of which one is joined to one outside it. Inside a unit: the
    elements (their open and close tokens) that do not wrap it whole, and the atoms strictly inside it or in such an
    element."""
    n = len(sentences)
    if not n:
        return []
    starts = [s for s, _ in sentences]

    def sentence_of(pos: int) -> int:
        return max(bisect.bisect_right(starts, pos) - 1, 0)

    spans: Dict[int, Tuple[int, int, bool, int, int]] = {}   # id(element) -> first and last sentence it touches,
    opened: List[Tuple[Any, int]] = []                          # whether it starts and ends at their edges, range
    for kind, node, pos in tokens:
        if kind == "open":
            opened.append((node, pos))
        elif kind == "close":
            element, start = opened.pop()
            first = _NON_SPACE.search(text, start, pos)
            if first is not None:
                head, last = sentence_of(first.start()), sentence_of(start + len(text[start:pos].rstrip()) - 1)
                spans[id(element)] = (head, last, start <= sentences[head][0] and pos >= sentences[last][1], start, pos)
    # boundary k (between sentences k and k + 1) fused: a worklist over the elements, each fusing its inner
    # boundaries once; one that wraps sentences becomes part of a unit when a boundary at its edge is fused
    parent = list(range(n))                         # the first boundary >= k not fused (n - 1 never is)
    by_edge: Dict[int, List[Tuple[int, int]]] = {}
    work = [(head, last) for head, last, clean, _, _ in spans.values() if not clean]
    for head, last, clean, _, _ in spans.values():
        if clean and last > head:
            for edge in (head - 1, last):
                by_edge.setdefault(edge, []).append((head, last))

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    while work:
        head, last = work.pop()
        k = find(head)
        while k < last:
            parent[k] = k + 1
            work += by_edge.pop(k, [])
            k = find(k)
    units: List[Tuple[int, int, List[Token]]] = []
    first_sentence = 0
    for k in range(n):
        if find(k) == k:                            # boundary k not fused: a unit ends with sentence k
            units.append((sentences[first_sentence][0], sentences[k][1], []))
            first_sentence = k + 1
    unit_starts = [s for s, _, _ in units]

    def unit_at(pos: int) -> Tuple[int, int, List[Token]]:
        return units[max(bisect.bisect_right(unit_starts, pos) - 1, 0)]

    inside: Dict[int, List[Token]] = {}             # id(element) -> the tokens of the unit it is inside
    parents: List[Any] = []
    for kind, node, pos in tokens:                  # in document order: a parent is decided before its children
        held = inside.get(id(parents[-1])) if parents else None
        if kind == "open":
            head, _, _, start, end = spans[id(node)]
            s, e, inner = unit_at(sentences[head][0])
            if held is not None or not (start <= s and end >= e):
                inside[id(node)] = inner
                inner.append((kind, node, pos))
            parents.append(node)
        elif kind == "close":
            parents.pop()
            if id(node) in inside:
                inside[id(node)].append((kind, node, pos))
        elif kind == "atom":
            s, e, inner = unit_at(pos)
            if held is not None or s < pos < e:
                (held if held is not None else inner).append((kind, node, pos))
    return units


def html_layout(text: str, split_sentences: bool = True, language: Optional[str] = None) -> HtmlLayout:
    """An HTML document taken apart by the module's rules (translate.layout(text, format="html"))."""
    root = parse(text)
    builder = _Builder(split_sentences, language)
    builder.attributes(root)
    builder.block(root)
    return builder.done()
