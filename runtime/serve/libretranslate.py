"""LibreTranslate's contract (its server's libretranslate/app.py): POST /translate and /detect, GET /languages and
/frontend/settings, so that its clients (libretranslatepy, deep-translator's LibreTranslator, npm `libretranslate`,
Weblate) and its own web front end work unchanged.

- Fields q (a string, or a list in a JSON body), source, target, format, alternatives, api_key: from a JSON body
  (Content-Type application/json), else from the form body and the query string (a form field wins), as its
  server reads `request.values`. A form's q has its line endings made LF, as there.
- Answers {"translatedText": str | [str]} with "alternatives" when asked for, "detectedLanguage" for source
  "auto"; errors {"error": ...} with 400 (bad request, unknown language, limits), 403 (API key), 429, 500.
- The API key: api_key, else apiKey (npm `libretranslate` 1.0.1 sends its key under that name, which
  LibreTranslate's server ignores: there, that client is refused wherever a key is needed).
- Languages: a model's package languages (every source x target pair, the two differing); a package without
  them serves the pair `--languages` gives it, else the one its name ends with (OPUS-MT's "-en-de").
  When two models serve one pair, the first on the command line does. Each language is known by its
  LibreTranslate code (languages.libretranslate_code: ISO 639-1 where one exists, "fr" for a model's "fra",
  "fra_Latn" or >>fra<<) and listed once, with its English name; a request may name it in any form
  languages.resolve takes ("fra", "fr-FR").
- /detect: per text (each item of a q list: a list of lists), up to 3 {confidence (0-100), language}, the likeliest
  first (runtime/documents/detect.py), among every language the detector knows; a text without letters gets confidence 0.
- source "auto": each text's own language (each q item's, not one for the batch): the likeliest one the server
  translates into `target`, if the detector gives it at least half the confidence of its first guess; else 400
  naming the language the text seems to be in. A text without letters takes en (else the first source language).
- format "html": q is an HTML document (runtime/documents/html_document.py): the text between the tags is translated, the
  markup kept, inline tags placed by the translation's alignment.
- Each q is a document (runtime/documents/text.py): split into paragraphs and sentences, which the model translates, and
  put back together with its line breaks, blank lines, list markers and spaces. The sentences of every q of a
  request go to the scheduler as the texts of one job (rows of one batch, not one job each). --char-limit counts
  the characters of q, of all of them for a list, as LibreTranslate's server does; --batch-limit the entries of q.
"""
from __future__ import annotations

import asyncio
import re
from typing import Any, Dict, List, Optional, Tuple

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..documents.files import FORMATS as FILE_FORMATS
from ..documents.text import DocumentError, Translation
from ..documents.translate import FORMATS, alignment_options, layout, translations
from ..package.languages import language_name, libretranslate_code, resolve
from .service import Answer, HTTPError, Pair, Service, endpoint, json_object
from .scheduler import TRANSLATE

# a package name that ends with its language pair, as OPUS-MT's do: "opus-mt-en-de", "numbers-en-de"
NAME_PAIR = re.compile(r"(?:^|[-_.])([a-z]{2,3})-([a-z]{2,3})$")
# where npm `libretranslate` 1.0.1 puts the API key (LibreTranslate's name is api_key)
NPM_KEY_FIELD = "apiKey"
DETECTIONS = 3                  # languages /detect answers per text, as LibreTranslate's
# source "auto" takes a language the server translates from if the detector gives it at least this share of its
# first guess's confidence: a short text's guesses are close (bench/results/design-notes.md has one)
AUTO_SHARE = 0.5
# LibreTranslate's --frontend-timeout default: its front end translates this many ms after the last key press
FRONTEND_TIMEOUT_MS = 500


def name_pair(name: str) -> Optional[Tuple[str, str]]:
    match = NAME_PAIR.search(name)
    return (match.group(1), match.group(2)) if match else None


def language_table(translators: Dict[str, Any], given: Dict[str, Tuple[str, str]]) -> Dict[Tuple[str, str], Pair]:
    """(source, target) in LibreTranslate's codes -> Pair (the model's own codes), over the models in their
    command-line order (the first keeps a shared pair)."""
    table: Dict[Tuple[str, str], Pair] = {}
    for name, translator in translators.items():
        langs = translator.package.languages
        if langs is not None:
            for source in langs.source:
                for target in langs.target:
                    pair = (libretranslate_code(source), libretranslate_code(target))
                    if pair[0] != pair[1]:
                        table.setdefault(pair, Pair(name, source, target))
            continue
        named = given.get(name) or name_pair(name)
        if named is not None:
            table.setdefault((libretranslate_code(named[0]), libretranslate_code(named[1])), Pair(name, None, None))
    return table


@endpoint
async def languages(request: Request) -> Response:
    service: Service = request.app.state.service
    service.check_ready()
    targets: Dict[str, List[str]] = {}
    for source, target in service.languages:
        targets.setdefault(source, []).append(target)
    # LibreTranslate lists every language with the targets it translates into
    codes = sorted(set(targets) | {t for ts in targets.values() for t in ts})
    return JSONResponse([{"code": c, "name": language_name(c), "targets": sorted(targets.get(c, []))}
                         for c in codes])


@endpoint
async def frontend_settings(request: Request) -> Response:
    """What LibreTranslate's web front end reads first: its limits, whether a key is needed, its first languages
    (source "auto"; target English, else the first target language)."""
    service: Service = request.app.state.service
    service.check_ready()
    targets = sorted({t for _, t in service.languages})
    target = "en" if "en" in targets else targets[0] if targets else "en"
    files = any(getattr(route, "path", None) == "/translate_file" for route in request.app.routes)
    keys = service.settings.api_keys is not None
    return JSONResponse({
        "charLimit": service.settings.char_limit, "frontendTimeout": FRONTEND_TIMEOUT_MS, "apiKeys": keys,
        "keyRequired": keys, "suggestions": False, "filesTranslation": files,
        "supportedFilesFormat": list(FILE_FORMATS) if files else [],
        "language": {"source": {"code": "auto", "name": "Auto Detect"},
                     "target": {"code": target, "name": language_name(target)}}})


@endpoint
async def detect(request: Request) -> Response:
    service: Service = request.app.state.service
    values, _ = await fields(request)
    service.check_key(values.get("api_key") or values.get(NPM_KEY_FIELD))
    q = values.get("q")
    if not q:
        raise _missing("q")
    batch = isinstance(q, list)
    texts = service.check_texts(q if batch else [q], "q")
    service.check_ready()
    answers = [[{"confidence": round(100 * d.confidence, 1), "language": d.language} for d in _detect(text)] or [{"confidence": 0.0, "language": _fallback(service, None)}]
               for text in texts]
    return JSONResponse(answers if batch else answers[0])


def _detect(text: str) -> List[Any]:
    from ..documents.detect import detect

    return detect(text, DETECTIONS)


def _fallback(service: Service, target: Optional[str]) -> str:
    """The source language of a text without letters: en, else the first the server translates (into target)."""
    sources = sorted({s for s, t in service.languages if target is None or t == target})
    return "en" if "en" in sources or not sources else sources[0]


def detect_source(service: Service, text: str, index: Optional[int], target: str) -> Tuple[str, float]:
    """source "auto": the language of one text that the server translates into target (see the module's
    docstring), and its confidence (0-100); 400 naming what it seems to be in where the server has none."""
    sources = {s for s, t in service.languages if t == target}
    found = _detect(text)
    if not found:
        return _fallback(service, target), 0.0
    for d in found:
        code = resolve(d.language, sources)
        if code is not None and d.confidence >= AUTO_SHARE * found[0].confidence:
            return code, round(100 * d.confidence, 1)
    top = found[0]
    where = "q" if index is None else f"q[{index}]"
    raise HTTPError(400, f"{where} seems to be {language_name(libretranslate_code(top.language))} ({top.language}, "
                         f"{100 * top.confidence:.0f}% sure), which this server does not translate into {target}; "
                         f"it translates into {target} from {', '.join(sorted(sources))}: name the source language")


async def fields(request: Request) -> Tuple[Dict[str, Any], bool]:
    """The request's fields as LibreTranslate reads them, and whether they came as JSON."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
        return await json_object(request), True
    values: Dict[str, Any] = dict(request.query_params)
    form = await request.form()
    values.update({k: v for k, v in form.items() if isinstance(v, str)})
    return values, False


def _missing(name: str) -> HTTPError:
    return HTTPError(400, f"Invalid request: missing {name} parameter")


def target_code(service: Service, target: str) -> str:
    """A request's target as the server knows it (in any form languages.resolve takes: "fra" for "fr"); 400 for one
    that no model translates into."""
    service.check_ready()
    codes = {c for st in service.languages for c in st}
    found = resolve(target, codes) or target
    if not any(t == found for _, t in service.languages):
        raise HTTPError(400, f"{target} is not supported" if found not in codes
                        else f"{found} is not available as a target language")
    return found


def pick_pair(service: Service, source: str, target: str) -> Tuple[str, Pair]:
    """The pair for source/target, each in any form languages.resolve takes ("fra" for "fr")."""
    service.check_ready()
    codes = {c for st in service.languages for c in st}
    source, target = resolve(source, codes) or source, resolve(target, codes) or target
    pair = service.languages.get((source, target))
    if pair is None:
        bad = source if source not in codes else target
        if bad not in codes:
            raise HTTPError(400, f"{bad} is not supported")
        raise HTTPError(400, f"{target} is not available as a target language from {source}")
    return source, pair


def _alternatives(value: Any, limit: int) -> int:
    try:
        n = max(0, int(value))
    except (TypeError, ValueError, OverflowError):              # OverflowError: 1e999, which json reads as inf
        raise HTTPError(400, "Invalid request: alternatives parameter is not a number") from None
    if n > limit:
        raise HTTPError(400, f"Invalid request: alternatives parameter must be <= {limit}")
    return n


@endpoint
async def translate(request: Request) -> Response:
    service: Service = request.app.state.service
    values, is_json = await fields(request)
    service.check_key(values.get("api_key") or values.get(NPM_KEY_FIELD))
    q, source, target = values.get("q"), values.get("source"), values.get("target")
    for name, value in (("q", q), ("source", source), ("target", target)):
        if not value:
            raise _missing(name)
    if not isinstance(source, str) or not isinstance(target, str):
        raise HTTPError(400, "Invalid request: source and target must be strings")
    n_alt = _alternatives(values.get("alternatives", 0), service.settings.alternatives_limit)
    text_format = values.get("format") or "text"
    if text_format not in FORMATS:
        raise HTTPError(400, f"{text_format} format is not supported")
    if not is_json and isinstance(q, str):          # a form's or a query's value is a str
        q = "\n".join(q.splitlines())
    batch = isinstance(q, list)
    texts = service.check_texts(q if batch else [q], "q")
    chars, limit = sum(map(len, texts)), service.settings.char_limit
    if chars > limit:
        raise HTTPError(400, f"Invalid request: request ({chars}) exceeds text limit ({limit})")
    if source == "auto":
        target = target_code(service, target)
        detected = [detect_source(service, text, i if batch else None, target) for i, text in enumerate(texts)]
        picked = [pick_pair(service, code, target) for code, _ in detected]
    else:
        picked = [pick_pair(service, source, target)] * len(texts)
    try:
        layouts = [layout(text, language=code, format=text_format) for text, (code, _) in zip(texts, picked)]
    except DocumentError as e:
        raise HTTPError(400, f"Invalid request: q: {e}") from None
    # the sentences of the texts of one pair (all of them, but where source "auto" finds several languages): one job
    owner = [i for i, lay in enumerate(layouts) for _ in lay.sentences]
    sentences = [s for lay in layouts for s in lay.sentences]
    hypotheses: List[List[Translation]] = [[] for _ in sentences]
    groups = [rows for rows in ([r for r, i in enumerate(owner) if picked[i][1] == pair]
                                for pair in dict.fromkeys(p for _, p in picked)) if rows]
    jobs = [asyncio.ensure_future(_translate_sentences(
        request, service, picked[owner[rows[0]]][1], [sentences[r] for r in rows],
        [layouts[i] for i in dict.fromkeys(owner[r] for r in rows)], n_alt)) for rows in groups]
    try:
        done = await asyncio.gather(*jobs)
    except BaseException:
        for job in jobs:
            job.cancel()
        raise
    for rows, found in zip(groups, done):
        for row, translated in zip(rows, found):
            hypotheses[row] = translated
    best, alternatives = documents_answer(layouts, hypotheses, n_alt)
    answer: Dict[str, Any] = {"translatedText": best if batch else best[0]}
    if source == "auto":
        languages = [{"confidence": confidence, "language": code} for code, confidence in detected]
        answer["detectedLanguage"] = languages if batch else languages[0]
    if n_alt:
        answer["alternatives"] = alternatives if batch else alternatives[0]
    return Answer(answer)


async def _translate_sentences(request: Request, service: Service, pair: Pair, sentences: List[str],
                               layouts: List[Any], n_alt: int) -> List[List[Translation]]:
    """One job: the sentences of the texts (`layouts`) that one pair translates, each sentence's hypotheses."""
    model, scheduler = service.scheduler(pair.model)
    options: Dict[str, Any] = {}
    if pair.source_lang is not None:
        options.update(source_lang=pair.source_lang, target_lang=pair.target_lang)
    if n_alt:
        beam = {**scheduler.translator.package.generation}.get("beam_size", 4)
        options.update(num_hypotheses=n_alt + 1, beam_size=max(beam, n_alt + 1))
    options.update(alignment_options(scheduler.translator, layouts))
    results = await service.run(request, model, scheduler, TRANSLATE, sentences, options)
    return translations(scheduler.translator, sentences, results, pair.source_lang, pair.target_lang)


def documents_answer(layouts: List[Any], hypotheses: List[List[Translation]], n_alt: int
                     ) -> Tuple[List[str], List[List[str]]]:
    """Per document, its translation (each sentence's best hypothesis) and its alternatives: the k-th joins each
    sentence's k-th hypothesis (its best where it has fewer), as argos-translate combines them; without repeats, the
    best or empty ones (LibreTranslate's filter_unique)."""
    best: List[str] = []
    alternatives: List[List[str]] = []
    pos = 0
    for lay in layouts:
        mine = hypotheses[pos:pos + len(lay.sentences)]
        pos += len(lay.sentences)
        best.append(lay.join([h[0] for h in mine]))
        alts = (lay.join([h[k] if k < len(h) else h[0] for h in mine]) for k in range(1, n_alt + 1))
        alternatives.append(list(dict.fromkeys(a for a in alts if a.strip() and a != best[-1])))
    return best, alternatives
