"""Documents (runtime/documents.py): the layout rules (property-tested: the text around the sentences survives
exactly), translate_document(s) against translate_batch of the sentences with the shipped numbers-en-de model,
`seq2onnx translate --document / --no-split`, and LibreTranslate's /translate through its clients (libretranslatepy,
deep-translator's translate and translate_file) on a multi-paragraph text, as one job of the server's."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("sentencex", reason="the documents extra: pip install '.[documents]'")

from seq2onnx.runtime import Seq2OnnxError, Translator, translate_document, translate_documents  # noqa: E402
from seq2onnx.runtime.documents import MAX_PARAGRAPH_CHARS, DocumentError, layout  # noqa: E402

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
        f"{translator.translate('forty-two')}\n{translator.translate('nine')}"      # issue #52: not one number
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
    code = f"import sys; {pre}from seq2onnx.runtime.cli import main; sys.exit(main(sys.argv[1:]))"
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

from test_serve import Server, metrics, one_line_error  # noqa: E402


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

    from seq2onnx.runtime import documents

    line = "\u201cQ.\u201d Z\xa0.+.e.g.Z3.5b\u2022+\u2022\u2022a-a3.5)\u2022...*"
    assert documents._segment(sentencex.segment, "en", line) == [line]          # the real panic, caught
    lay = documents.layout(line)
    assert len(lay.sentences) > 1 and "\xa0" in "".join(lay.sentences)
    assert lay.join(lay.sentences) == line
