"""Files translated whole: .txt, .html, .srt and .docx read, their text translated as documents (translate.py), and
written back in the same format (`seq2onnx translate-file`, the server's /translate_file).

- .txt: the file is one document. .html: one document with format="html" (html_document.py keeps the markup).
- .srt: each cue's text lines are one document; cue numbers, timings and the blank lines between cues are kept
  byte for byte. A cue without its number or a well-formed timing (HH:MM:SS,mmm --> HH:MM:SS,mmm, start <= end) is
  refused, naming its line.
- .docx: the text of word/document.xml, its headers, footers, footnotes and endnotes. In each paragraph (and
  each hyperlink in it), a group of consecutive text runs (w:r holding formatting and one w:t) is one document,
  translated sentence by sentence; each word of a translation goes into the run (the formatting) of the source
  word it is aligned to (the model's word alignment, where the package has attention: a format-2 package), else
  into the run its sentence starts in. A tab, a break, a field or a picture ends a group; a bookmark or a spelling
  mark between its runs moves after its translation. Everything else (the other parts of the package, the XML
  around the runs) is copied byte for byte: only the runs' text changes, so nothing that Word declares and that
  the XML round trip of a parser might drop (namespaces that mc:Ignorable names) is lost.
- Text files are UTF-8 (a BOM is kept); other bytes are refused, naming the offset.
Every read is bounded: the file (FileLimits.max_bytes), the text translated (max_chars), and for a .docx the zip's
members (count, sizes, compression ratio: a zip bomb is refused before anything is inflated) and its XML (no DTD,
so no entity expansion).
"""
from __future__ import annotations

import codecs
import dataclasses
import io
import os
import re
import shutil
import zipfile
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple
from xml.parsers import expat
from xml.sax.saxutils import escape

from .text import Layout
from .translate import alignment_options, join_translations, layout, splitter_language
from ..errors import Seq2OnnxError
from ..options import DecodingOptions, TranslationOptions

FORMATS = (".txt", ".html", ".srt", ".docx")        # what LibreTranslate's argos-translate-files calls them
ALIASES = {".htm": ".html"}
# a .docx: the zip's entries, what they may inflate to in all, per XML part read, and the inflation ratio of one
# member (deflate reaches ~1000:1 only on degenerate data: a zip bomb)
MAX_ZIP_MEMBERS = 4096
MAX_UNZIPPED_BYTES = 512 << 20
MAX_XML_BYTES = 64 << 20
MAX_RATIO = 200
RATIO_FROM_BYTES = 1 << 20          # smaller members are not ratio-checked: a page of XML may deflate 300:1
COPY_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class FileLimits:
    """What one file may hold (`seq2onnx translate-file` and `serve`'s flags of the same names)."""
    max_bytes: int = 10 << 20       # the file itself (--max-file-bytes)
    max_chars: int = 100_000        # characters of text to translate in it (--max-file-chars)


class FileError(Seq2OnnxError, ValueError):
    """A file that cannot be translated (its format, its encoding, a broken .srt or .docx, a limit): the message
    names where, and the fix."""


def file_format(name: str) -> str:
    """The format of a file by its name's extension (".txt", ".html", ".srt", ".docx"), or FileError."""
    ext = os.path.splitext(name)[1].lower()
    ext = ALIASES.get(ext, ext)
    if ext not in FORMATS:
        raise FileError(f"{name!r}: {'a file without an extension' if not ext else ext + ' files'} cannot be "
                        f"translated; send one of {', '.join(FORMATS)}")
    return ext


def translate_file_bytes(translator: Any, data: bytes, fmt: str, limits: FileLimits = FileLimits(),
                         language: Optional[str] = None, split_sentences: bool = True, **options: Any) -> bytes:
    """A file's bytes (format `fmt`, file_format's) translated with a Translator (or anything with its
    check_options, run_batch, engine and package): the translated file's bytes, in the same format. language: the
    source language's code (the sentence splitter's rules); options: translate_batch's. FileError (or
    documents.DocumentError) for a file that cannot be translated."""
    call, decoding = translator.check_options(1, **options)
    return translate_file_with(translator, data, fmt, call, decoding, limits, language, split_sentences,
                               call.return_alignment if "return_alignment" in options else None)


def translate_file_with(translator: Any, data: bytes, fmt: str, call: TranslationOptions, decoding: DecodingOptions,
                        limits: FileLimits = FileLimits(), language: Optional[str] = None, split_sentences: bool = True,
                        alignment: Optional[bool] = None) -> bytes:
    """translate_file_bytes with the records check_options made of its options, for one text (a target_prefix or
    constraints entry, if any, is given to every document). alignment: whether the sentences are translated with
    return_alignment; None: where the documents' markup needs it and the model has attention (a .docx: always)."""
    if len(data) > limits.max_bytes:
        raise FileError(f"the file has {len(data):,} bytes; at most {limits.max_bytes:,} (--max-file-bytes)")
    how = _How(translator, call, decoding, split_sentences, splitter_language(translator, language, call.source_lang),
               alignment)
    if fmt == ".docx":
        return _translate_docx(how, data, limits)
    bom, text = _decode(data)
    if fmt == ".srt":
        return bom + _translate_srt(how, text, limits).encode("utf-8")
    _check_chars(len(text), limits)
    if fmt in (".html", ".txt"):
        return bom + how.documents([text], "html" if fmt == ".html" else "text")[0].encode("utf-8")
    raise FileError(f"{fmt} files cannot be translated; send one of {', '.join(FORMATS)}")


@dataclasses.dataclass(frozen=True)
class _How:
    """How a file's text is translated: the translator, the records check_options made of the options (their
    target_prefix and constraints, if any, one entry for every document), the sentence splitter's rules, and
    whether the sentences are translated with return_alignment (None: where the documents need it)."""
    translator: Any
    call: TranslationOptions
    decoding: DecodingOptions
    split_sentences: bool
    language: Optional[str]
    alignment: Optional[bool]

    def layouts(self, texts: Sequence[str], format: str = "text") -> List[Any]:
        return [layout(t, self.split_sentences, self.language, format) for t in texts]

    def with_alignment(self, needed: bool) -> TranslationOptions:
        """The call, with return_alignment as `alignment` says, else where the documents need it."""
        return dataclasses.replace(self.call, return_alignment=needed if self.alignment is None else self.alignment)

    def documents(self, texts: Sequence[str], format: str = "text") -> List[str]:
        """Each text translated as a document (translate.join_translations)."""
        layouts = self.layouts(texts, format)
        call = self.with_alignment(bool(alignment_options(self.translator, layouts)))
        return join_translations(self.translator, layouts, call.repeated(len(layouts)), self.decoding)


def _check_chars(n: int, limits: FileLimits) -> None:
    if n > limits.max_chars:
        raise FileError(f"the file holds {n:,} characters of text; at most {limits.max_chars:,} (--max-file-chars): "
                        f"split it into smaller files")


def _decode(data: bytes) -> Tuple[bytes, str]:
    """(the UTF-8 BOM if the file opens with one, its text)."""
    bom = codecs.BOM_UTF8 if data.startswith(codecs.BOM_UTF8) else b""
    try:
        return bom, data[len(bom):].decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileError(f"the file is not UTF-8 text (byte {len(bom) + e.start}: {data[len(bom) + e.start:][:1]!r}); "
                        f"save it as UTF-8") from None


# --- .srt ----------------------------------------------------------------------------------------------------
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|$)")
_TIME = r"(\d{1,3}):(\d{2}):(\d{2})[,.](\d{3})"
_TIMING = re.compile(rf"\s*{_TIME}\s*-->\s*{_TIME}(?:\s.*)?")


def _ms(h: str, m: str, s: str, ms: str) -> Optional[int]:
    if int(m) > 59 or int(s) > 59:
        return None
    return ((int(h) * 60 + int(m)) * 60 + int(s)) * 1000 + int(ms)


@dataclasses.dataclass
class _Cue:
    head: str                       # the blank lines before it, its number and timing lines, as they are
    text: str                       # its text lines with their line breaks (the document translated)
    end: str                        # the line break after its last text line


def srt_cues(text: str) -> List[_Cue]:
    """An .srt's cues (_Cue: head + text + end is the cue, every cue's is the file), or FileError naming the line
    that breaks the format."""
    lines = [m.group() for m in _LINE.finditer(text)]
    if lines and not lines[-1]:
        lines.pop()                                             # the empty match at the end
    cues: List[_Cue] = []
    i, head = 0, ""
    while i < len(lines):
        if not lines[i].strip():
            head += lines[i]
            i += 1
            continue
        number = i + 1
        if not lines[i].strip().isdigit():
            raise FileError(f"line {number}: {lines[i].strip()[:40]!r} is not a cue number; an .srt is cues of a "
                            f"number line, a timing line (00:00:01,000 --> 00:00:02,500) and text lines, each after "
                            f"a blank line")
        timing = _TIMING.fullmatch(lines[i + 1].rstrip("\r\n")) if i + 1 < len(lines) else None
        start = _ms(*timing.groups()[:4]) if timing else None
        stop = _ms(*timing.groups()[4:]) if timing else None
        if start is None or stop is None or stop < start:
            shown = lines[i + 1].strip()[:60] if i + 1 < len(lines) else "the end of the file"
            raise FileError(f"line {number + 1}: cue {lines[i].strip()}: {shown!r} is not a timing; write "
                            f"HH:MM:SS,mmm --> HH:MM:SS,mmm (minutes and seconds below 60, the end not before the "
                            f"start)")
        head += lines[i] + lines[i + 1]
        i += 2
        body: List[str] = []
        while i < len(lines) and lines[i].strip():
            if _TIMING.fullmatch(lines[i].rstrip("\r\n")):
                raise FileError(f"line {i + 1}: a timing inside the text of cue {lines[number - 1].strip()}; a "
                                f"blank line must come before each cue's number")
            body.append(lines[i])
            i += 1
        text_lines = "".join(body)
        stripped = text_lines.rstrip("\r\n")
        cues.append(_Cue(head, stripped, text_lines[len(stripped):]))
        head = ""
    if head:
        cues.append(_Cue(head, "", ""))
    return cues


def _translate_srt(how: _How, text: str, limits: FileLimits) -> str:
    cues = srt_cues(text)
    _check_chars(sum(len(c.text) for c in cues), limits)
    translations = how.documents([c.text for c in cues]) if cues else []
    return "".join(c.head + t + c.end for c, t in zip(cues, translations))


# --- .docx ---------------------------------------------------------------------------------------------------
W_NAMESPACES = ("http://schemas.openxmlformats.org/wordprocessingml/2006/main",      # transitional (Word's)
                "http://purl.oclc.org/ooxml/wordprocessingml/main")                  # strict
_PARTS = re.compile(r"word/(?:document|header\d*|footer\d*|footnotes|endnotes)\.xml")
# C0 characters XML 1.0 cannot hold, and U+FFFE/U+FFFF: never written into a part
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_WORD = re.compile(r"\S+")
# what a paragraph holds runs in besides itself: their runs are groups of their own (a hyperlink's text is
# translated on its own, and stays the link's)
_INLINE_SCOPES = ("hyperlink", "smartTag", "ins", "moveTo", "customXml", "fldSimple")
# empty elements a paragraph may hold between its runs that mark a place, not text (spelling marks, bookmarks,
# comment ranges): within a group they move after its translation, where in it they belong being unknown
_MARKERS = ("proofErr", "bookmarkStart", "bookmarkEnd", "commentRangeStart", "commentRangeEnd", "permStart",
            "permEnd")
# what a text run may hold besides its w:t: its formatting, and Word's note of where a page broke when it last
# laid the document out (copied with the run)
_RUN_MARKS = ("rPr", "lastRenderedPageBreak")


@dataclasses.dataclass
class _Run:
    start: int                      # w:r's bytes in the part: [start, end)
    end: int = -1
    t: Optional[Tuple[int, int]] = None     # its w:t's bytes
    text: str = ""
    pure: bool = True               # formatting (w:rPr) and one w:t, nothing else


@dataclasses.dataclass
class _Group:
    """Consecutive text runs of a paragraph, translated as one document."""
    runs: List[_Run]
    data: bytes                     # the part's bytes, which the runs' offsets index
    between: List[Tuple[int, int]] = dataclasses.field(default_factory=list)   # _MARKERS, runs of formatting only

    @property
    def text(self) -> str:
        return "".join(r.text for r in self.runs)


def _tag_end(data: bytes, i: int) -> int:
    """The offset just past the tag that starts at data[i] ("<"), quoted attribute values skipped."""
    quote = 0
    for j in range(i + 1, len(data)):
        c = data[j]
        if quote:
            if c == quote:
                quote = 0
        elif c in (0x22, 0x27):
            quote = c
        elif c == 0x3E:
            return j + 1
    raise FileError("the .docx holds broken XML (a tag that does not end)")


def _no_dtd(*_: Any) -> None:
    raise FileError("the .docx holds XML with a document type declaration, which Word never writes (it could "
                    "expand entities without bound): save the document again with a word processor")


def docx_groups(data: bytes, part: str) -> List[_Group]:
    """The text-run groups of one WordprocessingML part (its UTF-8 bytes), parsed by expat without a DTD."""
    if b"\x00" in data[:4] or re.match(
            rb"<\?xml[^>]*encoding=[\"'](?!utf-?8[\"'])", data[:200], re.IGNORECASE):
        raise FileError(f"the .docx part {part} is not UTF-8 XML; save the document again with a word processor")
    parser = expat.ParserCreate(namespace_separator=" ")
    parser.buffer_text = True
    parser.StartDoctypeDeclHandler = _no_dtd
    parser.EntityDeclHandler = _no_dtd
    groups: List[_Group] = []
    depth = 0
    # open w:p (and _INLINE_SCOPES within them): its depth, its children (a _Run, "marker", "edge")
    paragraphs: List[Tuple[int, List[Any]]] = []
    run: List[Optional[Tuple[int, _Run]]] = []      # per open paragraph, its open direct-child run
    text: List[str] = []
    in_t: List[bool] = [False]

    def start(name: str, attrs: Any) -> None:
        nonlocal depth
        ns, _, local = name.rpartition(" ")
        w = ns in W_NAMESPACES
        if paragraphs:
            p_depth, items = paragraphs[-1]
            open_run = run[-1]
            if depth == p_depth + 1:
                if w and local == "r":
                    r = _Run(parser.CurrentByteIndex)
                    items.append(r)
                    tag_end = _tag_end(data, r.start)
                    if data[tag_end - 2:tag_end] == b"/>":
                        r.end, r.pure = tag_end, False
                    else:
                        run[-1] = (depth, r)
                elif w and local in _MARKERS:
                    i = parser.CurrentByteIndex
                    tag_end = _tag_end(data, i)
                    items.append((i, tag_end) if data[tag_end - 2:tag_end] == b"/>" else "edge")
                else:
                    items.append("edge")
            elif open_run is not None and depth == open_run[0] + 1:
                r = open_run[1]
                if w and local == "t" and r.t is None:
                    i = parser.CurrentByteIndex
                    tag_end = _tag_end(data, i)
                    r.t = (i, tag_end)                              # its end set at the end event
                    in_t[0] = data[tag_end - 2:tag_end] != b"/>"
                    text.clear()
                elif not (w and local in _RUN_MARKS):
                    r.pure = False
        if w and (local == "p" or local in _INLINE_SCOPES and paragraphs and depth == paragraphs[-1][0] + 1):
            paragraphs.append((depth, []))
            run.append(None)
        depth += 1

    def end(name: str) -> None:
        nonlocal depth
        depth -= 1
        ns, _, local = name.rpartition(" ")
        if not paragraphs:
            return
        p_depth, items = paragraphs[-1]
        open_run = run[-1]
        if open_run is not None and depth == open_run[0] + 1 and in_t[0] and local == "t":
            r = open_run[1]
            r.t = (r.t[0], _tag_end(data, parser.CurrentByteIndex))         # type: ignore[index]
            r.text = "".join(text)
            in_t[0] = False
        elif open_run is not None and depth == open_run[0]:
            r = open_run[1]
            r.end = _tag_end(data, parser.CurrentByteIndex)
            run[-1] = None
        elif depth == p_depth:
            paragraphs.pop()
            run.pop()
            groups.extend(_paragraph_groups(items, data))

    def chars(t: str) -> None:
        if in_t[0]:
            text.append(t)

    parser.StartElementHandler, parser.EndElementHandler, parser.CharacterDataHandler = start, end, chars
    try:
        parser.Parse(data, True)
    except expat.ExpatError as e:
        raise FileError(f"the .docx part {part} is not well-formed XML ({e}); save the document again with a word "
                        f"processor") from None
    return groups


def _paragraph_groups(items: List[Any], data: bytes) -> List[_Group]:
    """A paragraph's (or an inline scope's) groups of consecutive text runs that hold more than white space: a
    marker (_MARKERS) or a run of formatting only between two text runs stays in the group (`between`); anything
    else ends it."""
    groups: List[_Group] = []
    current: List[_Run] = []
    between: List[Tuple[int, int]] = []
    pending: List[Tuple[int, int]] = []             # markers after the group's last text run so far
    for item in items + ["edge"]:
        if isinstance(item, _Run) and item.pure and item.t is not None:
            if current:
                between += pending
            current.append(item)
            pending = []
        elif isinstance(item, tuple) or (isinstance(item, _Run) and item.pure):
            pending.append(item if isinstance(item, tuple) else (item.start, item.end))
        else:
            if "".join(r.text for r in current).strip():
                groups.append(_Group(current, data, between))
            current, between, pending = [], [], []
    return groups


def _run_bytes(data: bytes, run: _Run, text: str) -> bytes:
    """The run's bytes with its w:t holding `text` (spaces kept: xml:space="preserve")."""
    t_start, t_end = run.t                                                  # type: ignore[misc]
    qname = re.match(rb"<([^\s/>]+)", data[t_start:t_start + 200]).group(1)  # type: ignore[union-attr]
    new_t = (b"<" + qname + b' xml:space="preserve">' + escape(_NOT_XML.sub("", text)).encode("utf-8")
             + b"</" + qname + b">")
    return data[run.start:t_start] + new_t + data[t_end:run.end]


def _owners(group: _Group) -> List[int]:
    """The run index of each character of the group's text."""
    return [i for i, r in enumerate(group.runs) for _ in r.text]


def _segments(group: _Group, lay: Layout, hypotheses: Sequence[str], alignments: Sequence[Optional[list]]
              ) -> List[Tuple[int, str]]:
    """The group's translation as (run index, text) pieces in order: the text between sentences stays in the run
    it was in; each word of a sentence's translation goes to the run of the source word it is aligned to (its
    first), an unaligned one to its previous word's, and the white space after a word with it. Where the alignment
    does not fit the words (another tokenizer's words), the whole sentence goes to the run it starts in."""
    owner = _owners(group)
    out: List[Tuple[int, str]] = []
    pos = 0

    def keep(start: int, end: int) -> None:
        for i in range(start, end):
            out.append((owner[i], group.text[i]))

    for k, (sentence, hyp) in enumerate(zip(lay.sentences, hypotheses)):
        keep(pos, pos + len(lay.pieces[k]))
        pos += len(lay.pieces[k])
        first = owner[pos] if pos < len(owner) else 0
        source_words = [owner[pos + m.start()] for m in _WORD.finditer(sentence)]
        target = list(_WORD.finditer(hyp))
        pairs = alignments[k] or []
        word_run: Dict[int, int] = {}
        if pairs and all(s < len(source_words) and t < len(target) for s, t in pairs):
            for s, t in pairs:
                word_run.setdefault(t, source_words[s])
        current = first
        lead = hyp[:target[0].start()] if target else hyp
        if lead:
            out.append((current, lead))
        for j, m in enumerate(target):
            current = word_run.get(j, current)
            tail = hyp[m.start():target[j + 1].start() if j + 1 < len(target) else len(hyp)]
            out.append((current, tail))
        pos += len(sentence)
    keep(pos, len(owner))
    merged: List[Tuple[int, str]] = []
    for run_index, text in out:
        if merged and merged[-1][0] == run_index:
            merged[-1] = (run_index, merged[-1][1] + text)
        elif text:
            merged.append((run_index, text))
    return merged


def _check_zip(z: zipfile.ZipFile) -> List[zipfile.ZipInfo]:
    members = z.infolist()
    if len(members) > MAX_ZIP_MEMBERS:
        raise FileError(f"the .docx holds {len(members):,} zip entries; at most {MAX_ZIP_MEMBERS:,} (a document "
                        f"has tens): it is no document")
    total = sum(m.file_size for m in members)
    if total > MAX_UNZIPPED_BYTES:
        raise FileError(f"the .docx unzips to {total:,} bytes; at most {MAX_UNZIPPED_BYTES:,} (a zip bomb?)")
    for m in members:
        if m.file_size > RATIO_FROM_BYTES and m.file_size > MAX_RATIO * max(m.compress_size, 1):
            raise FileError(f"the .docx entry {m.filename!r} inflates {m.file_size // max(m.compress_size, 1):,} "
                            f"times ({m.compress_size:,} -> {m.file_size:,} bytes); at most {MAX_RATIO} (a zip "
                            f"bomb?)")
        if _PARTS.fullmatch(m.filename) and m.file_size > MAX_XML_BYTES:
            raise FileError(f"the .docx part {m.filename} has {m.file_size:,} bytes of XML; at most "
                            f"{MAX_XML_BYTES:,}")
    names = [m.filename for m in members]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise FileError(f"the .docx holds two zip entries named {twice!r}; save the document again with a word "
                        f"processor")
    if "word/document.xml" not in names:
        raise FileError("the file is a zip archive without word/document.xml: not a .docx (save it as Word "
                        "document, .docx)")
    return members


def _translate_docx(how: _How, data: bytes, limits: FileLimits) -> bytes:
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as e:
        raise FileError(f"the file is not a .docx (not a zip archive: {e}); save it as Word document, .docx") from None
    try:
        with z:
            members = _check_zip(z)
            parts: Dict[str, Tuple[bytes, List[_Group]]] = {}
            for m in members:
                if _PARTS.fullmatch(m.filename):
                    raw = z.read(m)
                    parts[m.filename] = (raw, docx_groups(raw, m.filename))
            groups = [g for _, gs in parts.values() for g in gs]
            _check_chars(sum(len(g.text) for g in groups), limits)
            edits = _translate_groups(how, groups)
            out = io.BytesIO()
            with zipfile.ZipFile(out, "w") as w:
                for m in members:
                    if m.filename in parts:
                        raw, gs = parts[m.filename]
                        w.writestr(_copy_info(m), _splice(raw, [(g.runs[0].start, g.runs[-1].end, edits[id(g)]) for g in gs]),
                                   compress_type=m.compress_type)
                    else:
                        with z.open(m) as src, w.open(_copy_info(m), "w") as dst:
                            shutil.copyfileobj(src, dst, COPY_CHUNK)
            return out.getvalue()
    except (zipfile.BadZipFile, RuntimeError, NotImplementedError, EOFError, zlib.error) as e:
        raise FileError(f"the .docx cannot be read ({e}); save the document again with a word processor") from None


def _copy_info(m: zipfile.ZipInfo) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(m.filename, m.date_time)
    info.compress_type, info.external_attr, info.file_size = m.compress_type, m.external_attr, m.file_size
    return info


def _splice(data: bytes, edits: List[Tuple[int, int, bytes]]) -> bytes:
    out, pos = [], 0
    for start, end, new in sorted(edits):
        out += [data[pos:start], new]
        pos = end
    out.append(data[pos:])
    return b"".join(out)


def _translate_groups(how: _How, groups: List[_Group]) -> Dict[int, bytes]:
    """Each group's new bytes (by id), its runs holding its translation (placed by the word alignment where the
    model has attention)."""
    layouts = how.layouts([g.text for g in groups])
    sentences = [s for lay in layouts for s in lay.sentences]
    call = how.with_alignment(how.translator.engine.has_attention)
    aligned = call.return_alignment
    results = how.translator.run_batch(sentences, call.repeated(len(sentences)), how.decoding) if sentences else []
    edits: Dict[int, bytes] = {}
    pos = 0
    for g, lay in zip(groups, layouts):
        mine = results[pos:pos + len(lay.sentences)]
        pos += len(lay.sentences)
        hyps = [r.hypotheses[0] for r in mine]
        alignments = [r.alignment[0] if aligned and r.alignment else None for r in mine]
        segments = _segments(g, lay, hyps, alignments) or [(0, "")]
        edits[id(g)] = b"".join([_run_bytes(g.data, g.runs[i], text) for i, text in segments]
                                + [g.data[start:end] for start, end in g.between])
    return edits
