"""Documents (runtime/documents/text.py): the layout rules (property-tested: the text around the sentences survives
exactly), translate_document(s) against translate_batch of the sentences with the shipped numbers-en-de model,
`seq2onnx translate --document / --no-split`, and LibreTranslate's /translate through its clients (libretranslatepy,
deep-translator's translate and translate_file) on a multi-paragraph text, as one job of the server's.
HTML documents (runtime/documents/html_document.py, format="html"): every tag of a few hundred generated snippets comes back
once in a well-formed document (with the model's alignments, without them, and with reordering ones), the rules
(blocks, inline tags, kept elements, entities, title/alt), malformed markup, the limits, the CLI and the server."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("sentencex", reason="the documents extra: pip install '.[documents]'")

from tests import DATA
from seq2onnx.runtime import Seq2OnnxError, Translator, translate_document, translate_documents  # noqa: E402
from seq2onnx.runtime.documents.text import MAX_PARAGRAPH_CHARS, DocumentError  # noqa: E402
from seq2onnx.runtime.documents.translate import layout  # noqa: E402

MODEL = "numbers-en-de"
# paragraphs, a blank line, a list with "- " / "* " / "1. " markers, indentation, CRLF, spaces at both ends
DOCUMENT = ("forty-two. nine.\n\n  seven hundred and one.  twelve.  \r\n- three.\n* eighty.\n1. ninety. six.\n"
            "\n\n   \nfive")


@pytest.fixture(scope="module")
def translator() -> Translator:
    return Translator(MODEL)


def by_sentence(tr: Translator, text: str, **options) -> str:
    """What a document's translation must be: translate_batch of its sentences, put in its layout."""
    lay = layout(text)
    return lay.join([r.hypotheses[0] for r in tr.translate_batch(list(lay.sentences), **options)])


# --- layout rules --------------------------------------------------------------------------------------------
def test_layout_of_a_document():
    lay = layout(DOCUMENT)
    assert lay.sentences == ("forty-two.", "nine.", "seven hundred and one.", "twelve.", "three.", "eighty.",
                             "ninety.", "six.", "five")
    assert lay.pieces == ("", " ", "\n\n  ", "  ", "  \r\n- ", "\n* ", "\n1. ", " ", "\n\n\n   \n", "")
    assert layout(DOCUMENT, split_sentences=False).sentences == (
        "forty-two. nine.", "seven hundred and one.  twelve.", "three.", "eighty.", "ninety. six.", "five")
    # abbreviations and numbers do not end a sentence
    assert layout("Dr. Smith paid $3.50, e.g. for tea. He left.").sentences == (
        "Dr. Smith paid $3.50, e.g. for tea.", "He left.")


LINE_TEXT = st.lists(st.sampled_from(list("ab Z.!?-*+1)\t\u00a0\u3000\u2022") + ["e.g.", "Dr. ", "3.5", "...",
                                                                                  "\u201cQ.\u201d "]),
                     max_size=30).map("".join)
DOCUMENTS = st.lists(st.tuples(LINE_TEXT, st.sampled_from(["\n", "\r\n", "\r"])), max_size=8).map(
    lambda lines: "".join(text + end for text, end in lines)) | LINE_TEXT


@settings(max_examples=300, deadline=None)
@given(DOCUMENTS, st.booleans())
def test_layout_keeps_everything_but_the_sentences(text, split):
    lay = layout(text, split_sentences=split)
    assert lay.join(lay.sentences) == text
    for s in lay.sentences:                         # what the model gets: text, no white space around, no break
        assert s and s == s.strip() and not re.search(r"[\r\n]", s)
    out = lay.join(["X"] * len(lay.sentences))
    # line breaks, blank lines, each line's leading and trailing white space survive exactly
    assert re.findall(r"\r\n|\r|\n", out) == re.findall(r"\r\n|\r|\n", text)
    for a, b in zip(re.split(r"\r\n|\r|\n", text), re.split(r"\r\n|\r|\n", out)):
        assert b == a if not a.strip() else (a[:len(a) - len(a.lstrip())] == b[:len(b) - len(b.lstrip())]
                                             and a[len(a.rstrip()):] == b[len(b.rstrip()):])
    if not split:                                   # one sentence per line with text
        assert len(lay.sentences) == sum(1 for line in re.split(r"\r\n|\r|\n", text)
                                         if line.strip() and not re.fullmatch(r"\s*(?:[-*+\u2022]|\d+[.)])\s+", line))


@pytest.mark.parametrize("marker", ["- ", "* ", "+ ", "\u2022 ", "1. ", "12) ", "  - ", "\t3. "])
def test_list_markers_are_kept(marker):
    lay = layout(f"{marker}seven. nine.")
    assert lay.sentences == ("seven.", "nine.") and lay.pieces[0] == marker
    assert layout("-5 degrees.").sentences == ("-5 degrees.",)       # no white space after it: no marker


@pytest.mark.parametrize("text, where", [("seven\x00", "line 1, column 6: control character U+0000"),
                                         ("a\n\nb\x1b[31m", "line 3, column 2: control character U+001B"),
                                         ("a\r\x7f", "line 2, column 1: control character U+007F"),
                                         ("x\x85", "U+0085")])
def test_control_characters_are_refused(text, where):
    with pytest.raises(DocumentError, match=re.escape(where)):
        layout(text)


def test_a_line_too_long_is_refused():
    layout("a" * MAX_PARAGRAPH_CHARS)
    with pytest.raises(DocumentError, match=f"line 2: {MAX_PARAGRAPH_CHARS + 1} characters; .* at most "
                                            f"{MAX_PARAGRAPH_CHARS}: break it into lines"):
        layout("a\n" + "a" * (MAX_PARAGRAPH_CHARS + 1))


def test_without_the_splitter(monkeypatch, translator):
    monkeypatch.setitem(sys.modules, "sentencex", None)          # as if not installed: import raises ImportError
    with pytest.raises(Seq2OnnxError, match=r"needs the sentencex package: pip install 'seq2onnx\[documents\]' "
                                            r"\(or translate each line whole: split_sentences=False"):
        translate_document(translator, "seven. nine.")
    assert translate_document(translator, "seven.\n nine ", split_sentences=False) == \
        f"{translator.translate('seven.')}\n {translator.translate('nine')} "


# --- the Python API ------------------------------------------------------------------------------------------
def test_translate_document_is_translate_batch_of_its_sentences(translator):
    got = translate_document(translator, DOCUMENT)
    assert got == by_sentence(translator, DOCUMENT)
    assert got.count("\n") == DOCUMENT.count("\n") and "\r\n- " in got and got.endswith("\n\n\n   \n" + got[-len(
        translator.translate("five")):])
    assert translate_document(translator, "forty-two\nnine") == \
        f"{translator.translate('forty-two')}\n{translator.translate('nine')}"      # two lines, not one number
    # every translate_batch option applies; per-document options go to each of its sentences
    docs = [DOCUMENT, "  ", "", "seven. nine."]
    got = translate_documents(translator, docs, beam_size=1, max_decoding_length=3, target_prefix=[None, None, None,
                                                                                                    "sieben"])
    assert got[:3] == [by_sentence(translator, DOCUMENT, beam_size=1, max_decoding_length=3), "  ", ""]
    assert got[3] == by_sentence(translator, docs[3], beam_size=1, max_decoding_length=3,
                                 target_prefix=["sieben", "sieben"])
    with pytest.raises(ValueError, match=r"target_prefix must be a list with one entry per document \(4\)"):
        translate_documents(translator, docs, target_prefix=["x"])


# --- the CLI -------------------------------------------------------------------------------------------------
def seq2onnx(*args: str, input: bytes = b"", pre: str = "") -> subprocess.CompletedProcess:
    code = f"import sys; {pre}from seq2onnx.runtime.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], input=input, capture_output=True, timeout=120)


def test_cli_document(tmp_path, translator):
    path = tmp_path / "doc.txt"
    path.write_bytes(DOCUMENT.encode())
    # blocks of 2 lines: the same document
    for flags in ([], ["--max-batch-size", "2"]):
        done = seq2onnx("translate", MODEL, "--document", "-i", str(path), *flags)
        assert done.returncode == 0, done.stderr
        assert done.stdout.decode() == translate_document(translator, DOCUMENT)
    done = seq2onnx("translate", MODEL, "--document", "--no-split", "--beam-size", "1", input=DOCUMENT.encode())
    assert done.stdout.decode() == translate_document(translator, DOCUMENT, split_sentences=False, beam_size=1)


@pytest.mark.parametrize("args, input, message", [
    (["--no-split"], b"seven", "--no-split is an option of --document"),
    (["--document", "--n-best", "2", "--scores"], b"seven", "--n-best, --scores: an option for lines of sentences"),
    (["--document"], b"seven.\n\nnine\x07.\n", "line 3, column 5: control character U+0007"),
    (["--document"], b"seven\n" + b"x" * 10_000_000, f"line 2: longer than {4 * MAX_PARAGRAPH_CHARS} bytes"),
])
def test_cli_document_errors_are_one_line(args, input, message):
    done = seq2onnx("translate", MODEL, *args, input=input)
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1 and message in err, (done.returncode, err)


def test_cli_document_without_the_splitter():
    done = seq2onnx("translate", MODEL, "--document", input=b"seven. nine.", pre="sys.modules['sentencex'] = None; ")
    assert done.returncode == 2 and b"pip install 'seq2onnx[documents]'" in done.stderr and not done.stdout
    done = seq2onnx("translate", MODEL, "--document", "--no-split", input=b"seven\n",
                    pre="sys.modules['sentencex'] = None; ")
    assert done.returncode == 0, done.stderr


# --- the server: LibreTranslate's /translate -------------------------------------------------------------------
httpx = pytest.importorskip("httpx", reason="the test extra")
pytest.importorskip("starlette", reason="the serve extra: pip install '.[serve]'")
from deep_translator import LibreTranslator  # noqa: E402
from libretranslatepy import LibreTranslateAPI  # noqa: E402

from tests.runtime.serve.test_serve import Server, metrics, one_line_error  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("documents"))                  # continuous batching, LibreTranslate's limits
    yield s
    s.stop()


def test_libretranslate_clients_keep_the_document(server, translator, tmp_path):
    # libretranslatepy sends a form body, deep-translator q in the query string: form values, whose line breaks
    # LibreTranslate makes "\n" ("\n".join(q.splitlines()): a final line break goes too)
    form = "\n".join(DOCUMENT.splitlines())
    assert LibreTranslateAPI(server.url).translate(DOCUMENT, "en", "de") == translate_document(translator, form)
    lt = LibreTranslator(source="en", target="de", api_key="unused", custom_url=server.url + "/")   # it needs one
    assert lt.translate(DOCUMENT) == translate_document(translator, form)
    path = tmp_path / "doc.txt"
    path.write_text(DOCUMENT, newline="")
    assert lt.translate_file(str(path)) == translate_document(translator, form)
    # a JSON body keeps q as sent; a list: one document each
    want = translate_document(translator, DOCUMENT)
    r = httpx.post(server.url + "/translate", json={"q": [DOCUMENT, "forty-two\nnine"], "source": "en",
                                                   "target": "de"}, timeout=60)
    assert r.json() == {"translatedText": [want, translate_document(translator, "forty-two\nnine")]}


def test_alternatives_keep_the_layout(server, translator):
    text = "seven. nine.\n\n- twelve."
    r = httpx.post(server.url + "/translate", json={"q": text, "source": "en", "target": "de", "alternatives": 2},
                   timeout=60).json()
    hyps = [x.hypotheses for x in translator.translate_batch(["seven.", "nine.", "twelve."], beam_size=4,
                                                             num_hypotheses=3)]
    lay = layout(text)
    assert r["translatedText"] == lay.join([h[0] for h in hyps])
    alts = [lay.join([h[k] if k < len(h) else h[0] for h in hyps]) for k in (1, 2)]
    assert r["alternatives"] == list(dict.fromkeys(a for a in alts if a != r["translatedText"]))


def test_a_long_document_is_one_job(server, translator):
    """100 sentences: one job whose rows decode together (decoder steps about one sentence's, not 100 sentences')."""
    sentences = [f"{w}." for w in ["seven", "forty-two", "nine", "twelve", "eighty"]] * 20
    text = " ".join(sentences[:50]) + "\n\n" + " ".join(sentences[50:])
    key_jobs = ("seq2onnx_jobs_total", (("model", MODEL), ("outcome", "done")))
    key_steps = ("seq2onnx_decoder_steps_total", (("model", MODEL),))
    before = metrics(server)
    r = httpx.post(server.url + "/translate", json={"q": text, "source": "en", "target": "de"}, timeout=60)
    after = metrics(server)
    assert r.json()["translatedText"] == translate_document(translator, text)
    assert after[key_jobs] - before.get(key_jobs, 0) == 1
    longest = max(len(x.token_ids[0]) for x in translator.translate_batch(sentences))
    assert after[key_steps] - before.get(key_steps, 0) <= 2 * (longest + 1) < len(sentences)


@pytest.mark.parametrize("body, status, message", [
    ({"q": "seven\x00 nine"}, 400, "Invalid request: q: line 1, column 6: control character U+0000"),
    # each under --char-limit (5000), together over it: LibreTranslate counts the characters of all of q
    ({"q": ["seven. " * 400, "nine. " * 400]}, 400, "Invalid request: request (5200) exceeds text limit (5000)"),
    ({"q": "a" * 10_000_000}, 413, "the request body is larger than"),
])
def test_bad_documents(server, body, status, message):
    r = httpx.post(server.url + "/translate", json={"source": "en", "target": "de", **body}, timeout=60)
    assert message in one_line_error(r, status)


def test_a_line_the_splitter_panics_on():
    """sentencex 1.0.32 panics (a Rust panic, a BaseException) on this line as it is: hypothesis found it. The
    splitter sees wide spaces as spaces, so the line splits, and a line it would still panic on is one sentence."""
    import sentencex

    from seq2onnx.runtime.documents import text, translate

    line = "\u201cQ.\u201d Z\xa0.+.e.g.Z3.5b\u2022+\u2022\u2022a-a3.5)\u2022...*"
    assert text._segment(sentencex.segment, "en", line) == [line]          # the real panic, caught
    lay = translate.layout(line)
    assert len(lay.sentences) > 1 and "\xa0" in "".join(lay.sentences)
    assert lay.join(lay.sentences) == line


# --- HTML ------------------------------------------------------------------------------------------------------
import random  # noqa: E402
from html.parser import HTMLParser  # noqa: E402

from seq2onnx.runtime.documents.text import Translation  # noqa: E402
from seq2onnx.runtime.documents.html_document import MAX_HTML_CHARS, MAX_HTML_DEPTH, MAX_HTML_TAGS, VOID, html_layout  # noqa: E402,E501

FORMAT_1 = DATA / "numbers-en-de-earlier-contract"   # no attention
WORDS = ["seven", "nine", "twelve", "forty-two", "eighty", "one hundred and five", "three"]


class Tags(HTMLParser):
    """A document's start tags as written (title/alt values left out: they are translated), end tags, and whether
    they nest: each end tag closes the innermost open element, none stays open."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.starts, self.ends, self.open, self.nested = [], [], [], True
        self.feed(text)
        self.close()
        self.nested = self.nested and not self.open

    def handle_starttag(self, tag, attrs):
        raw = re.sub(r"""\s(title|alt)=("[^"]*"|'[^']*'|[^\s>]+)""", r" \1", self.get_starttag_text())
        self.starts.append(raw)
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.starts.append(self.get_starttag_text())

    def handle_endtag(self, tag):
        self.ends.append(tag)
        if not self.open or self.open.pop() != tag:
            self.nested = False


def tags_kept(source: str, out: str, ends: bool = True) -> None:
    """Every tag of `source` once in `out`, which nests (a well-formed document); ends=False: `source` leaves end
    tags implied, which `out` writes."""
    a, b = Tags(source), Tags(out)
    assert b.nested, out
    assert sorted(a.starts) == sorted(b.starts), (source, out)
    assert not ends or sorted(a.ends) == sorted(b.ends), (source, out)


def snippet(rng: random.Random, depth: int = 0) -> str:
    """A random well-formed HTML fragment of blocks, inline tags, kept elements, entities, comments."""
    out = []
    for _ in range(rng.randint(1, 4)):
        k = rng.random()
        if k < 0.35 or depth > 3:
            out.append(rng.choice(WORDS) + rng.choice([". ", " ", ", ", "! ", " &amp; ", "&nbsp;", ""]))
        elif k < 0.6:
            tag = rng.choice(["b", "i", "span", "em", 'a href="/x?a=1&amp;b=2"', 'abbr title="nine"'])
            out.append(f"<{tag}>{snippet(rng, depth + 1)}</{tag.split()[0]}>")
        elif k < 0.75:
            tag = rng.choice(["p", "div", "li", "h2", "td"])
            out.append(f"<{tag}>{snippet(rng, depth + 1)}</{tag}>")
        else:
            out.append(rng.choice(['<img src="x.png" alt="seven">', "<br>", "<code>a &lt; b</code>",
                                   "<!-- nine -->", "<script>if (a < b) {}</script>", '<span translate="no">nine</span>',
                                   "<style>p { color: red }</style>", "<b></b>", "<wbr/>"]))
    return "".join(out)


SNIPPETS = [snippet(random.Random(i)) for i in range(300)]


def kept_as_written(source: str, out: str) -> None:
    for kept in re.findall(r"<code>.*?</code>|<script>.*?</script>|<style>.*?</style>|"
                           r'<span translate="no">.*?</span>', source):
        assert kept in out


def test_html_tags_come_back_once_and_nested(translator, translator_1):
    """The property, on 300 generated snippets: with alignments that reverse the words and without alignments (the
    rule a format_version 1 package gets); on 50 of them (the model's time), with the model's alignments and with a
    format_version 1 package's translations."""
    for source in SNIPPETS:
        lay = html_layout(source)
        reversed_words = []
        for sentence in lay.sentences:
            words = [m.span() for m in re.finditer(r"\S+", sentence)]
            n = len(words)
            reversed_words.append(Translation(" ".join(sentence[s:e] for s, e in reversed(words)),
                                              [(i, n - 1 - i) for i in range(n)], words))
        for out in (lay.join(reversed_words), lay.join([s.upper() for s in lay.sentences])):
            tags_kept(source, out)
            kept_as_written(source, out)
    for tr in (translator, translator_1):
        for source, out in zip(SNIPPETS[:50], translate_documents(tr, SNIPPETS[:50], format="html", beam_size=1)):
            tags_kept(source, out)
            kept_as_written(source, out)


def test_html_layout():
    doc = ('<!DOCTYPE html>\n<html><head><title>seven</title><style>p { x: "<b>" }</style></head>\n<body>'
           '<h1 title="nine &amp; five">twelve</h1>\n<p>seven. <b>nine</b> and <a href="/a?b=1&amp;c=2">twelve</a>.'
           ' <i>eighty. three.</i></p><ul><li>one<li>two</ul><p>five<br>six &nbsp;&copy; <code>x &lt; y</code>'
           ' seven</p><div translate="no">nine <b>ten</b></div><script>if (a < b) {}</script></body></html>')
    lay = html_layout(doc)
    # blocks and <br> separate sentences; an inline tag stays in its sentence; kept elements are not read
    assert lay.sentences == ("nine & five", "seven", "twelve", "seven.", "nine and twelve.", "eighty.", "three.",
                             "one", "two", "five", "six \xa9 seven")
    out = lay.join([s.upper() for s in lay.sentences])
    assert out.startswith('<!DOCTYPE html>\n<html><head><title>SEVEN</title><style>p { x: "<b>" }</style></head>'
                          '\n<body><h1 title="NINE &amp; FIVE">TWELVE</h1>\n<p>SEVEN. ')
    # <i> wraps whole sentences: written around them; the <ul>'s implied </li> written
    assert ' <i>EIGHTY. THREE.</i></p><ul><li>ONE</li><li>TWO</li></ul>' in out
    assert '<div translate="no">nine <b>ten</b></div><script>if (a < b) {}</script></body></html>' in out
    # kept as written; an entity as the document wrote it (a no-break space is white space in a sentence)
    assert "SIX &copy; SEVEN<code>x &lt; y</code></p>" in out
    tags_kept(doc, out, ends=False)


def test_sentences_and_inline_tags():
    """An element that starts or ends inside a sentence joins the sentences it spans; one that wraps whole sentences
    is written around their translations (and an element inside a sentence stays in it); in <pre>, lines."""
    lay = html_layout("<p>seven. <b>nine. twelve</b> eighty. <i>five. three.</i> <u>ten <s>one.</s> two.</u></p>")
    assert lay.sentences == ("seven.", "nine. twelve eighty.", "five.", "three.", "ten one.", "two.")
    assert lay.join([s.upper() for s in lay.sentences]) == \
        "<p>SEVEN. <b>NINE. TWELVE EIGHTY.</b> <i>FIVE. THREE.</i> <u><s>TEN ONE.</s> TWO.</u></p>"
    lay = html_layout("<pre>seven.\n  <b>nine</b>   twelve.\n</pre>", split_sentences=False)
    assert lay.sentences == ("seven.", "nine twelve.")
    assert lay.join([s.upper() for s in lay.sentences]) == "<pre>SEVEN.\n  <b>NINE TWELVE.</b>\n</pre>"


def test_tags_follow_the_alignment():
    """Bergamot's rule: each element from the first to the last target word its source words align to."""
    lay = html_layout('<p><b>one</b> two <i>three <img src="x"></i></p>')
    assert lay.sentences == ("one two three",)
    words = [(0, 3), (4, 7), (8, 13)]
    got = lay.join([Translation("drei zwei eins", [(0, 2), (1, 1), (2, 0)], words)])
    # (a gap between two words is written once: before the <img>; the space that ended <i> is after the sentence)
    assert got == '<p><i>drei <img src="x"></i>zwei <b>eins</b> </p>'
    # nested: the inner element within its parent's words; an element whose words are another's gets none
    lay = html_layout("<p><b>one <i>two</i></b> three</p>")
    assert lay.join([Translation("eins zwei drei", [(0, 0), (1, 1), (2, 2)], words)]) == \
        "<p><b>eins <i>zwei</i></b> drei</p>"
    assert lay.join([Translation("zwei drei eins", [(0, 2), (1, 0), (2, 1)], words)]) == \
        "<p><b><i>zwei</i> drei eins</b></p>"
    lay = html_layout("<p><b>one</b> <i>two</i> three</p>")
    assert lay.join([Translation("eins zwei drei", [(0, 0), (0, 1), (1, 1), (2, 2)], words)]) == \
        "<p><b>eins zwei</b> <i></i>drei</p>"
    # an unaligned source word's element: after the word aligned to the word before it
    assert lay.join([Translation("eins drei", [(0, 0), (2, 1)], words)]) == "<p><b>eins</b> <i></i>drei</p>"
    # without alignments: the stated rule, the elements around the whole sentence
    assert lay.join(["eins zwei drei"]) == "<p><b><i>eins zwei drei</i></b></p>"


@pytest.fixture(scope="module")
def translator_1() -> Translator:
    return Translator(FORMAT_1)


def test_html_without_attention(translator_1):
    """A format_version 1 package: the rule without alignments, no error."""
    tr1 = translator_1
    doc = "<p><b>seven</b> and <i>nine</i>. <img src=x> twelve</p>"
    lay = html_layout(doc)
    assert translate_document(tr1, doc, format="html") == lay.join(
        [r.hypotheses[0] for r in tr1.translate_batch(list(lay.sentences))])
    assert translate_document(tr1, doc, format="html").startswith(f"<p><b><i>{tr1.translate('seven and nine.')}")


def test_html_is_translate_batch_of_its_sentences(translator):
    # where each source word that the alignment numbers lies ("▁" alone, of the double space, is a word of none)
    assert translator.source_words("forty-two  nine") == [(0, 9), None, (11, 15)]
    r = translator.translate_batch(["forty-two  nine"], return_alignment=True)[0]
    assert max(s for s, _ in r.alignment[0]) < 3
    doc = "<p>seven. <b>nine</b> and twelve.</p>\n<p title='five'>eighty</p>"
    lay = html_layout(doc)
    results = translator.translate_batch(list(lay.sentences), return_alignment=True, beam_size=2)
    assert translate_document(translator, doc, format="html", beam_size=2) == lay.join(
        [Translation(r.hypotheses[0], r.alignment[0], translator.source_words(s))
         for s, r in zip(lay.sentences, results)])
    assert translate_document(translator, doc, format="html").endswith(
        f"\n<p title=\"{translator.translate('five')}\">{translator.translate('eighty')}</p>")


@pytest.mark.parametrize("doc", ["<p>a<b>b<i>c</p>d", "</b>seven</i>", "<p>seven <b>nine", "<div><p>a</div></p>",
                                 "seven < nine & <b", "<p>seven</p", "<b/>nine<i>x</b></i>", "<!-- a -- b --!>",
                                 "<p>seven <!DOCTYPE <? <a b='x> &",
                                 "<ul><li>one<li>two", "<table><tr><td>a<td>b<tr><td>c</table>", "<a href='x>seven",
                                 "&#99999999; &bogus; &amp", "<p>seven\n<b>nine</b>\n</p>"])
def test_malformed_html_comes_back_well_formed(translator, translator_1, doc):
    for tr in (translator, translator_1):
        out = translate_document(tr, doc, format="html")
        assert Tags(out).nested, out


@pytest.mark.parametrize("doc, message", [
    ("<b>" * 1000 + "seven", f"<b> opens an element {MAX_HTML_DEPTH + 1} deep; an HTML document may nest elements "
                             f"at most {MAX_HTML_DEPTH} deep"),
    ("<p>" + "a" * MAX_HTML_CHARS, f"{MAX_HTML_CHARS + 3} characters; an HTML document may hold at most "
                                   f"{MAX_HTML_CHARS}: translate it in parts"),
    ("<br>" * MAX_HTML_TAGS + "<", f'{MAX_HTML_TAGS + 1} tags ("<"); an HTML document may hold at most {MAX_HTML_TAGS}'),
    ("<p>seven</p>\n<script>var a = '<p>';", "line 2: <script> is never closed"),
    ("<style>p {}", "line 1: <style> is never closed"),
    # html.parser would search the rest of the document for the end of each (quadratic time)
    ("<p>seven</p>\n" + "<!--x>" * 10_000, "line 2: a comment (<!--) that is never closed: close it with -->"),
    ("<![CDATA[x]>" * 10_000, "line 1: a marked section (<![) that is never closed: close it with ]]>"),
    ("<p><![foo[x]]>", "line 1, column 4: markup that cannot be read"),
    ("<p>seven</p>\n<p>ni\x00ne</p>", "line 2, column 6: control character U+0000"),
    ("<p>" + "seven " * 20_000 + "</p>", f"the paragraph at line 1: 120000 characters of text; a paragraph of a "
                                         f"document may hold at most {MAX_PARAGRAPH_CHARS}"),
])
def test_html_limits(doc, message):
    with pytest.raises(DocumentError, match=re.escape(message)):
        html_layout(doc)


def test_cli_html(tmp_path, translator):
    doc = "<p>seven. <b>nine</b> and twelve.</p>\n<p title='five'>eighty</p>\n"
    done = seq2onnx("translate", MODEL, "--format", "html", "--beam-size", "2", input=doc.encode())
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == translate_document(translator, doc, format="html", beam_size=2)
    for args, input, message in [([], b"<b>" * 1000, f"at most {MAX_HTML_DEPTH} deep"),
                                 ([], b"<p>a</p><script>x", "line 1: <script> is never closed"),
                                 ([], b"a" * (4 * MAX_HTML_CHARS + 1), f"the input is longer than "
                                                                        f"{4 * MAX_HTML_CHARS} bytes"),
                                 (["--n-best", "2"], b"<p>a</p>", "--n-best: an option for lines of sentences")]:
        done = seq2onnx("translate", MODEL, "--format", "html", *args, input=input)
        err = done.stderr.decode()
        assert done.returncode == 2 and err.count("\n") == 1 and message in err and not done.stdout, err


def test_libretranslate_html(server, translator):
    doc = '<p>seven. <b>nine</b> and twelve.</p><img alt="five" src="x.png"><code>a &lt; b</code>'
    r = httpx.post(server.url + "/translate", json={"q": [doc, "<i>eighty</i>"], "source": "en", "target": "de",
                                                   "format": "html"}, timeout=60)
    assert r.json() == {"translatedText": [translate_document(translator, doc, format="html"),
                                           translate_document(translator, "<i>eighty</i>", format="html")]}
    r = httpx.post(server.url + "/translate", data={"q": "<b>seven</b>", "source": "en", "target": "de",
                                                   "format": "html", "alternatives": 1}, timeout=60)
    assert r.json()["translatedText"] == translate_document(translator, "<b>seven</b>", format="html")
    # refused, one line each; the server goes on serving
    for body, status, message in [({"q": "<b>" * 1000}, 400, f"at most {MAX_HTML_DEPTH} deep"),
                                  ({"q": "<p>seven</p><script>x"}, 400, "<script> is never closed"),
                                  ({"q": "<p>" * 10_000_000}, 413, "the request body is larger than")]:
        r = httpx.post(server.url + "/translate", json={"source": "en", "target": "de", "format": "html", **body},
                       timeout=60)
        assert message in one_line_error(r, status)
    r = httpx.post(server.url + "/translate", json={"q": "<b>seven</b>", "source": "en", "target": "de",
                                                   "format": "html"}, timeout=60)
    assert r.json() == {"translatedText": translate_document(translator, "<b>seven</b>", format="html")}
