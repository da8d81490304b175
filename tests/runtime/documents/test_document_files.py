"""Files translated whole (runtime/documents/files.py) with the shipped numbers-en-de model: .txt, .srt, .docx (and
.html, once documents/translate.py takes format="html"), each against translate_document(s) of its text; their limits and
broken or hostile files (a broken .srt, a zip bomb, an XML entity bomb, a file over the size limits); `seq2onnx
translate-file`; and the server's /translate_file and /download_file (runtime/serve/files.py) as LibreTranslate's
clients send them: a multipart form (file, source, target, api_key), the answer's translatedFileUrl fetched.
LibreTranslate's client libraries have no file call (libretranslatepy 2.1.4: translate, detect, languages;
npm `libretranslate` 1.0.1: translate; deep-translator's translate_file reads the file here and sends /translate:
tests/runtime/documents/test_documents.py), so the form is sent as LibreTranslate's web page and API docs send it."""
from __future__ import annotations

import io
import re
import subprocess
import sys
import zipfile

import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("sentencex", reason="the documents extra: pip install '.[documents]'")

from seq2onnx.runtime import Translator, translate_document, translate_documents  # noqa: E402
from seq2onnx.runtime.documents.files import (MAX_RATIO, MAX_ZIP_MEMBERS, FileError, FileLimits,  # noqa: E402
                                             _Group, _Run, _segments, file_format, srt_cues,
                                             translate_file_bytes)
from seq2onnx.runtime.documents.translate import layout  # noqa: E402

MODEL = "numbers-en-de"
TEXT = "forty-two. nine.\r\n\r\n- seven hundred and one.\r\n  twelve. eighty.\r\n"
SRT = ("1\r\n00:00:01,000 --> 00:00:02,500\r\nforty-two.\r\nnine. twelve.\r\n\r\n\r\n"
       "2\r\n00:01:03.000 --> 00:01:04,250  X1:10 X2:20\r\nseven hundred.\r\n\r\n3\r\n00:01:05,000 --> 00:01:06,000\r\n")
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
DOC_HEAD = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
            f'<w:document xmlns:w="{W}" xmlns:w14="http://schemas.microsoft.com/office/word/2010/wordml" '
            'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" mc:Ignorable="w14"><w:body>')
# a paragraph of a bold and an italic run (a spelling mark, a bookmark and a run of formatting only between them;
# Word's page-break note in one), one whose runs a tab divides, a table cell's, a hyperlink's (another group), an
# empty one
MARKS = '<w:proofErr w:type="spellStart"/><w:bookmarkStart w:id="0" w:name="_GoBack"/><w:bookmarkEnd w:id="0"/>'
DOC_BODY = ('<w:p><w:pPr><w:jc w:val="center"/></w:pPr><w:r><w:rPr><w:b/></w:rPr><w:t xml:space="preserve">seven. '
            f'</w:t></w:r>{MARKS}<w:r><w:rPr><w:i/></w:rPr><w:lastRenderedPageBreak/><w:t>nine.</w:t></w:r>'
            '<w:proofErr w:type="spellEnd"/></w:p>'
            '<w:p><w:r><w:t>forty-two</w:t></w:r><w:r><w:tab/></w:r><w:r><w:rPr><w:u w:val="single"/></w:rPr>'
            '<w:t>twelve.</w:t></w:r></w:p>'
            '<w:tbl><w:tr><w:tc><w:p><w:r><w:t>eighty &amp; one.</w:t></w:r></w:p></w:tc></w:tr></w:tbl>'
            '<w:p><w:r><w:t xml:space="preserve">six </w:t></w:r><w:hyperlink w:history="1"><w:r><w:t>seven</w:t>'
            '</w:r></w:hyperlink></w:p><w:p/>')
IMAGE = b"\x89PNG" + bytes(range(256)) * 8


def docx(body: str = DOC_BODY, head: str = DOC_HEAD, extra=()) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/'
                   'package/2006/content-types"/>')
        z.writestr("word/document.xml", head + body + "</w:body></w:document>")
        z.writestr("word/footer1.xml", f'<w:ftr xmlns:w="{W}"><w:p><w:r><w:t>nine.</w:t></w:r></w:p></w:ftr>')
        z.writestr("word/media/image1.png", IMAGE, compress_type=zipfile.ZIP_STORED)
        for name, data in extra:
            z.writestr(name, data)
    return out.getvalue()


@pytest.fixture(scope="module")
def translator() -> Translator:
    return Translator(MODEL)


def paragraphs(xml: str):
    """Each w:p's runs as (formatting, text) pairs: (the names of the w:rPr's children, joined; the w:t's text,
    None for no w:t)."""
    import xml.etree.ElementTree as ET
    ns = {"w": W}
    out = []
    for p in ET.fromstring(xml).iter(f"{{{W}}}p"):
        runs = []
        for r in p.iter(f"{{{W}}}r"):
            rpr, t = r.find("w:rPr", ns), r.find("w:t", ns)
            runs.append(("" if rpr is None else " ".join(c.tag.split("}")[1] for c in rpr),
                         None if t is None else t.text))
        out.append(runs)
    return out


# --- the formats -----------------------------------------------------------------------------------------------
def test_txt_is_one_document(translator):
    data = b"\xef\xbb\xbf" + TEXT.encode()
    assert translate_file_bytes(translator, data, ".txt") == b"\xef\xbb\xbf" + translate_document(
        translator, TEXT).encode()


def test_srt_keeps_numbers_and_timings(translator):
    out = translate_file_bytes(translator, SRT.encode(), ".srt").decode()
    cues = ["forty-two.\r\nnine. twelve.", "seven hundred.", ""]
    want = translate_documents(translator, cues)
    # every line but the cues' text, byte for byte: numbers, timings (a "." and positions after them), CRLF,
    # two blank lines, a last cue without text
    assert out == ("1\r\n00:00:01,000 --> 00:00:02,500\r\n" + want[0] + "\r\n\r\n\r\n"
                   "2\r\n00:01:03.000 --> 00:01:04,250  X1:10 X2:20\r\n" + want[1] + "\r\n\r\n"
                   "3\r\n00:01:05,000 --> 00:01:06,000\r\n")
    assert "\r\n" in want[0]                                # a cue's two lines stay two
    assert "".join(c.head + c.text + c.end for c in srt_cues(SRT)) == SRT


@pytest.mark.parametrize("srt, message", [
    ("1\n00:00:01,000 --> 00:00:00,500\nseven\n", "line 2: cue 1: '00:00:01,000 --> 00:00:00,500' is not a timing"),
    ("1\n00:00:01,000 -> 00:00:02,000\nseven\n", "line 2: cue 1"),
    ("1\n00:61:01,000 --> 00:62:00,000\nseven\n", "minutes and seconds below 60"),
    ("1\n", "line 2: cue 1: 'the end of the file' is not a timing"),
    ("seven\n00:00:01,000 --> 00:00:02,000\n", "line 1: 'seven' is not a cue number"),
    ("1\n00:00:01,000 --> 00:00:02,000\nseven\nnine\n00:00:03,000 --> 00:00:04,000\n", "line 5: a timing inside the text of cue 1; a blank line"),
])
def test_broken_srt(translator, srt, message):
    with pytest.raises(FileError, match=re.escape(message)):
        translate_file_bytes(translator, srt.encode(), ".srt")


def test_docx_runs_keep_their_formatting(translator):
    data = docx()
    out = zipfile.ZipFile(io.BytesIO(translate_file_bytes(translator, data, ".docx")))
    original = zipfile.ZipFile(io.BytesIO(data))
    xml = out.read("word/document.xml").decode()
    # what Word declares (namespaces, mc:Ignorable) and every other entry, byte for byte
    assert xml.startswith(DOC_HEAD) and out.namelist() == original.namelist()
    assert out.read("word/media/image1.png") == IMAGE
    b, i, u = "b", "i", "u"
    seven, nine, twelve = (translator.translate(s) for s in ("seven.", "nine.", "twelve."))
    got = paragraphs(xml)
    # each sentence's words in the run of the source words they are aligned to; the space between them stays bold
    assert got[0] == [(b, seven + " "), (i, nine)]
    # byte for byte: the marks between the runs after them, the one after the last run where it was
    assert ('<w:p><w:pPr><w:jc w:val="center"/></w:pPr><w:r><w:rPr><w:b/></w:rPr><w:t xml:space="preserve">'
            f'{seven} </w:t></w:r><w:r><w:rPr><w:i/></w:rPr><w:lastRenderedPageBreak/><w:t xml:space="preserve">'
            f'{nine}</w:t></w:r>{MARKS}<w:proofErr w:type="spellEnd"/></w:p>') in xml
    assert got[1] == [("", translator.translate("forty-two")), ("", None), (u, twelve)]      # the tab divides
    assert got[2] == [("", translate_document(translator, "eighty & one."))]
    assert got[3] == [("", translator.translate("six") + " "), ("", translator.translate("seven"))]
    assert got[4] == []
    assert paragraphs(out.read("word/footer1.xml").decode()) == [[("", nine)]]
    # a part without text to translate comes out as it went in
    same = docx('<w:p><w:r><w:t xml:space="preserve">  </w:t></w:r><w:r><w:tab/></w:r></w:p>')
    assert zipfile.ZipFile(io.BytesIO(translate_file_bytes(translator, same, ".docx"))).read(
        "word/document.xml") == zipfile.ZipFile(io.BytesIO(same)).read("word/document.xml")


def test_docx_words_follow_the_alignment():
    """Words of one sentence in three runs: each translated word goes to its aligned source word's run, an
    unaligned one stays with the word before it; an alignment that does not fit the words puts the sentence in the
    run it starts in."""
    runs = [_Run(0, text="one "), _Run(0, text="two three"), _Run(0, text=" four.")]
    group = _Group(runs, b"")
    lay = layout(group.text)
    assert _segments(group, lay, ["eins zwei drei vier."], [[(0, 0), (1, 3), (2, 1), (3, 2)]]) == [
        (0, "eins "), (1, "zwei "), (2, "drei "), (1, "vier.")]
    assert _segments(group, lay, ["eins zwei"], [[(0, 0), (9, 1)]]) == [(0, "eins zwei")]
    assert _segments(group, lay, ["eins zwei"], [None]) == [(0, "eins zwei")]


WORDS = st.sampled_from(["seven", "nine.", "Dr.", "  ", " ", "a-b", "\u00e9t\u00e9", "x."])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(WORDS, min_size=1, max_size=4).map("".join), min_size=1, max_size=5),
       st.lists(st.lists(WORDS, max_size=5).map(" ".join), min_size=8, max_size=8),
       st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=6))
def test_a_group_holds_its_translation_exactly(texts, hyps, pairs):
    """Whatever the runs, translations and alignment: the runs' new texts, in order, are the group's translation
    (layout.join), every run index is one of the group's, and no two neighbours share a run."""
    group = _Group([_Run(0, text=t) for t in texts], b"")
    lay = layout(group.text)
    mine = hyps[:len(lay.sentences)] + [""] * (len(lay.sentences) - len(hyps))
    segments = _segments(group, lay, mine, [pairs] * len(lay.sentences))
    assert "".join(t for _, t in segments) == lay.join(mine)
    assert all(0 <= i < len(texts) and t for i, t in segments)
    assert all(a[0] != b[0] for a, b in zip(segments, segments[1:]))


def zip_of(entries, compression=zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as z:
        for name, data in entries:
            z.writestr(name, data)
    return out.getvalue()


LAUGHS = ('<?xml version="1.0"?><!DOCTYPE w:document [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">'
          '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>'
          f'<w:document xmlns:w="{W}"><w:body><w:p><w:r><w:t>&c;</w:t></w:r></w:p></w:body></w:document>')


@pytest.mark.parametrize("data, message", [
    # a zip bomb: 16 MiB of zeros deflate to ~16 KB
    (lambda: zip_of([("word/document.xml", "<x/>"), ("word/media/big.bin", bytes(16 << 20))]),
     "the .docx entry 'word/media/big.bin' inflates"),
    (lambda: zip_of([("word/document.xml", "<x/>")] + [(f"a{i}", "") for i in range(MAX_ZIP_MEMBERS)],
                    zipfile.ZIP_STORED), f"zip entries; at most {MAX_ZIP_MEMBERS:,}"),
    (lambda: zip_of([("word/document.xml", LAUGHS)]), "document type declaration"),
    (lambda: zip_of([("word/document.xml", ('<?xml version="1.0" encoding="UTF-16"?>' + "<x/>").encode("utf-16"))]),
     "is not UTF-8 XML"),
    (lambda: zip_of([("word/document.xml", f'<w:document xmlns:w="{W}"><w:p>')]), "not well-formed XML"),
    (lambda: zip_of([("word/other.xml", "<x/>")]), "without word/document.xml"),
    (lambda: b"PK\x03\x04 not really a zip", "not a zip archive"),
    (lambda: TEXT.encode(), "not a zip archive"),
])
def test_hostile_docx(translator, data, message):
    with pytest.raises(FileError, match=re.escape(message)):
        translate_file_bytes(translator, data(), ".docx")


def test_limits_and_encoding(translator):
    with pytest.raises(FileError, match=r"the file has 11 bytes; at most 10 \(--max-file-bytes\)"):
        translate_file_bytes(translator, b"seven nine.", ".txt", FileLimits(max_bytes=10))
    with pytest.raises(FileError, match=r"holds 11 characters of text; at most 5 \(--max-file-chars\)"):
        translate_file_bytes(translator, b"seven nine.", ".txt", FileLimits(max_chars=5))
    # a .docx counts its runs' text, not its XML; an .srt its cues' text
    limit = FileLimits(max_chars=sum(map(len, ["seven. nine.", "forty-two", "twelve.", "eighty & one.", "six ",
                                                 "seven", "nine."])))
    translate_file_bytes(translator, docx(), ".docx", limit)
    with pytest.raises(FileError, match="characters of text"):
        translate_file_bytes(translator, docx(), ".docx", FileLimits(max_chars=limit.max_chars - 1))
    with pytest.raises(FileError, match=r"not UTF-8 text \(byte 6: b'\\xff'\); save it as UTF-8"):
        translate_file_bytes(translator, b"seven \xff nine", ".txt")
    with pytest.raises(FileError, match=r"'a\.pdf': \.pdf files cannot be translated; send one of \.txt, \.html"):
        file_format("a.pdf")
    assert file_format("Page.HTM") == ".html" and file_format("x.tar.SRT") == ".srt"


def test_html(translator):
    page = "<html><body><p>seven. <b>nine.</b></p>\n<p>forty-two</p></body></html>"
    assert translate_file_bytes(translator, page.encode(), ".html") == translate_document(
        translator, page, format="html").encode()


# --- `seq2onnx translate-file` --------------------------------------------------------------------------------
def seq2onnx(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from seq2onnx.runtime.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, timeout=120)


def test_cli(tmp_path, translator):
    files = {"a.txt": TEXT.encode(), "a.srt": SRT.encode(), "a.docx": docx()}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        done = seq2onnx("translate-file", MODEL, str(tmp_path / name), str(tmp_path / f"out-{name}"))
        assert done.returncode == 0 and not done.stderr, done.stderr
        assert (tmp_path / f"out-{name}").read_bytes() == translate_file_bytes(translator, data, name[1:])
    done = seq2onnx("translate-file", MODEL, str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--beam-size", "1",
                    "--no-split")
    assert (tmp_path / "b.txt").read_bytes() == translate_file_bytes(
        translator, TEXT.encode(), ".txt", split_sentences=False, beam_size=1)


@pytest.mark.parametrize("args, message", [
    (["a.txt", "a.txt"], "OUTPUT a.txt is the input file (INPUT a.txt)"),
    (["bad.srt", "out.srt"], "INPUT bad.srt: line 2: cue 1:"),
    (["bomb.docx", "out.docx"], "INPUT bomb.docx: the .docx entry 'big' inflates"),
    (["a.txt", "out.txt", "--max-file-bytes", "10"], "INPUT a.txt: more than 10 bytes (--max-file-bytes)"),
    (["a.pdf", "out.pdf"], "'a.pdf': .pdf files cannot be translated"),
    (["a.txt", "out.txt", "--n-best", "2"], "--n-best: not an option of translate-file"),
    (["missing.txt", "out.txt"], "INPUT missing.txt: no such file"),
])
def test_cli_refusals(tmp_path, args, message):
    (tmp_path / "a.txt").write_bytes(TEXT.encode())
    (tmp_path / "a.pdf").write_bytes(b"%PDF")
    (tmp_path / "bad.srt").write_bytes(b"1\n00:00:01,000 --> 00:00:00,500\nseven\n")
    (tmp_path / "bomb.docx").write_bytes(zip_of([("word/document.xml", "<x/>"), ("big", bytes(8 << 20))]))
    done = subprocess.run([sys.executable, "-c", "import sys; from seq2onnx.runtime.cli.main import main; "
                           "sys.exit(main(sys.argv[1:]))", "translate-file", MODEL, *args], capture_output=True,
                          timeout=120, cwd=tmp_path)
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1 and message in err, err
    assert (tmp_path / "a.txt").read_bytes() == TEXT.encode()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(("out", ".tmp"))] == []


# --- the server: /translate_file and /download_file ------------------------------------------------------------
httpx = pytest.importorskip("httpx", reason="the test extra")
pytest.importorskip("starlette", reason="the serve extra: pip install '.[serve]'")
from libretranslatepy import LibreTranslateAPI  # noqa: E402

from seq2onnx.runtime.serve.service import HTTPError  # noqa: E402
from seq2onnx.runtime.serve.files import FileStore  # noqa: E402
from tests.runtime.serve.test_serve import Server, metrics, one_line_error  # noqa: E402

KEY = "file-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("files")
    (tmp / "keys").write_text(f"{KEY}\n")
    # small request limits: a file's sentences go as several jobs; what the requests in progress may hold
    # together is less than a long file's jobs hold in all
    s = Server(tmp, "--api-keys", str(tmp / "keys"), "--max-request-rows", "16", "--max-file-chars", "20000",
               "--max-answer-bytes", "16384", "--max-pending-bytes", "16384")
    yield s
    s.stop()


def translate_file(server, name: str, data: bytes, **fields) -> httpx.Response:
    form = {"source": "en", "target": "de", "api_key": KEY, **fields}
    return httpx.post(server.url + "/translate_file", data=form, files={"file": (name, data)}, timeout=120)


@pytest.mark.parametrize("name, data, download", [
    ("a.txt", TEXT.encode(), "a_de.txt"),
    # werkzeug's secure_filename, as LibreTranslate names it
    ("C:\\subs\\\u00dcber Subs (1).srt", SRT.encode(), "Uber_Subs_1_de.srt"),
    ("a.docx", docx(), "a_de.docx"),
    ("page.html", b"<p>seven. <b>nine.</b></p>", "page_de.html"),
])
def test_translate_file_and_download(server, translator, name, data, download):
    r = translate_file(server, name, data)
    assert r.status_code == 200 and list(r.json()) == ["translatedFileUrl"], r.text
    url = r.json()["translatedFileUrl"]
    ext = name.rsplit(".", 1)[1]
    assert re.fullmatch(rf"{re.escape(server.url)}/download_file/[0-9a-f]{{32}}\.{re.escape(download)}", url), url
    got = httpx.get(url, timeout=60)
    assert got.status_code == 200 and got.headers["content-disposition"] == f'attachment; filename="{download}"'
    assert got.content == translate_file_bytes(translator, data, "." + ext)
    assert httpx.get(url, timeout=60).content == got.content              # downloaded again, as LibreTranslate's


def test_a_long_file_is_several_jobs(server, translator):
    """60 sentences at beam 4 are 240 decoder rows; --max-request-rows 16 lets a job hold 4: the file's sentences go
    as jobs within the limit, one after another, not as one refused request. Their answers (~1.5 kB each, reckoned
    up front) are more than --max-pending-bytes in all: each job gives its share back when it is done."""
    text = "\n".join(["seven. nine. twelve."] * 20)
    key = ("seq2onnx_jobs_total", (("model", MODEL), ("outcome", "done")))
    before = metrics(server).get(key, 0)
    r = translate_file(server, "long.txt", text.encode())
    assert httpx.get(r.json()["translatedFileUrl"], timeout=60).text == translate_document(translator, text)
    assert metrics(server)[key] - before == 15


@pytest.mark.parametrize("name, data, fields, status, message", [
    ("big.html", b"<p>" + b"seven " * (9 << 20) + b"</p>", {}, 413, "the request body is larger than 10551296"),
    ("bomb.docx", zip_of([("word/document.xml", "<x/>"), ("big", bytes(8 << 20))]), {}, 400,
     "Invalid request: the .docx entry 'big' inflates"),
    ("laughs.docx", zip_of([("word/document.xml", LAUGHS)]), {}, 400, "document type declaration"),
    ("bad.srt", b"1\n00:00:01,000 --> 00:00:00,500\nseven\n", {}, 400, "Invalid request: line 2: cue 1:"),
    ("a.pdf", b"%PDF", {}, 400, "Invalid request: file format not supported: 'a.pdf': .pdf files"),
    ("", b"seven", {}, 400, "Invalid request: missing file parameter"),
    ("a.txt", b"seven", {"target": ""}, 400, "Invalid request: missing target parameter"),
    ("a.txt", b"seven", {"target": "fr"}, 400, "fr is not supported"),
    ("a.txt", b"seven", {"api_key": "wrong"}, 403, "Invalid API key"),
    ("a.txt", b"seven \xff", {}, 400, "not UTF-8 text (byte 6"),
    ("a.txt", b"seven. " * 3000, {}, 400, "holds 21,000 characters of text; at most 20,000 (--max-file-chars)"),
])
def test_bad_files_are_4xx(server, translator, name, data, fields, status, message):
    r = translate_file(server, name, data, **fields)
    assert message in one_line_error(r, status)
    # the server goes on serving others
    assert LibreTranslateAPI(server.url, api_key=KEY).translate("seven. nine.", "en", "de") == \
        translate_document(translator, "seven. nine.")


def test_download_reads_only_the_store(server):
    r = translate_file(server, "a.txt", b"seven")
    key = r.json()["translatedFileUrl"].rsplit("/", 1)[1]
    for name in ["0" * 32 + ".a_de.txt", key[:-1], "..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd", ".." + key]:
        got = httpx.get(f"{server.url}/download_file/{name}", timeout=60)
        # an unknown name, or a path the route does not match
        assert got.status_code == 404 and ("no such file" in got.text or got.json() == {"error": "Not Found"}), got


def test_file_store_bounds():
    store = FileStore(max_bytes=10, ttl=3600, max_files=2)
    a = store.put(b"12345", "a_de.txt")
    assert store.get(a).name == "a_de.txt" and open(store.get(a).path, "rb").read() == b"12345"
    with pytest.raises(HTTPError, match=r"Slowdown: the server keeps 1 translated files of 5 bytes") as e:
        store.put(b"123456", "b_de.txt")                                # bytes
    assert e.value.status == 429 and int(e.value.headers["Retry-After"]) > 0
    store.put(b"1", "b_de.txt")
    with pytest.raises(HTTPError, match="at most 2 files"):
        store.put(b"1", "c_de.txt")                                     # count
    with pytest.raises(HTTPError, match="the translated file has 11 bytes; the server keeps at most 10"):
        store.put(b"x" * 11, "d_de.txt")
    expired = FileStore(max_bytes=10, ttl=0)
    key = expired.put(b"12345", "a_de.txt")
    path = expired._files[key].path
    assert expired.get(key) is None and expired.put(b"1234567890", "b_de.txt")      # its bytes given back
    import os
    assert not os.path.exists(path)
