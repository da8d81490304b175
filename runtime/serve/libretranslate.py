"""LibreTranslate's contract (its server's libretranslate/app.py): POST /translate and GET /languages, so that its
clients (libretranslatepy, deep-translator's LibreTranslator, npm `libretranslate`, Weblate) work unchanged.

- Fields q (a string, or a list in a JSON body), source, target, format, alternatives, api_key: from a JSON body
  (Content-Type application/json), else from the form body and the query string (a form field wins), as its
  server reads `request.values`. A form's q has its line endings made LF, as there.
- Answers {"translatedText": str | [str]} with "alternatives" when asked for, "detectedLanguage" for source
  "auto"; errors {"error": ...} with 400 (bad request, unknown language, limits), 403 (API key), 429, 500.
- The API key: api_key, else apiKey (npm `libretranslate` 1.0.1 sends its key under that name, which
  LibreTranslate's server ignores: there, that client is refused wherever a key is needed).
- Languages: a model's package languages (every source x target pair, the two differing); a package without
  them serves the pair `--languages` gives it, else the one its name ends with (OPUS-MT's "-en-de").
  When two models serve one pair, the first on the command line does.
- source "auto": we detect no language. It means the one source language that serves `target`; with several,
  400 naming them.
- format "html": q is an HTML document (runtime/html_document.py): the text between the tags is translated, the
  markup kept, inline tags placed by the translation's alignment.
- Each q is a document (runtime/documents.py): split into paragraphs and sentences, which the model translates, and
  put back together with its line breaks, blank lines, list markers and spaces. The sentences of every q of a
  request go to the scheduler as the texts of one job (rows of one batch, not one job each). --char-limit counts
  the characters of q, of all of them for a list, as LibreTranslate's server does; --batch-limit the entries of q.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict, List, Optional, Tuple

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..documents import FORMATS, DocumentError, Translation, alignment_options, layout, translations
from .app import Answer, HTTPError, Service, endpoint
from .scheduler import TRANSLATE

# a package name that ends with its language pair, as OPUS-MT's do: "opus-mt-en-de", "numbers-en-de"
NAME_PAIR = re.compile(r"(?:^|[-_.])([a-z]{2,3})-([a-z]{2,3})$")
# where npm `libretranslate` 1.0.1 puts the API key (LibreTranslate's name is api_key)
NPM_KEY_FIELD = "apiKey"


@dataclasses.dataclass(frozen=True)
class Pair:
    """How one (source, target) of LibreTranslate's is translated: which model, with which translate_batch
    languages (None: the package records none, and needs none)."""
    model: str
    source_lang: Optional[str]
    target_lang: Optional[str]


def name_pair(name: str) -> Optional[Tuple[str, str]]:
    match = NAME_PAIR.search(name)
    return (match.group(1), match.group(2)) if match else None


def language_table(translators: Dict[str, Any], given: Dict[str, Tuple[str, str]]) -> Dict[Tuple[str, str], Pair]:
    """(source, target) -> Pair, over the models in their command-line order (the first keeps a shared pair)."""
    table: Dict[Tuple[str, str], Pair] = {}
    for name, translator in translators.items():
        langs = translator.package.languages
        if langs is not None:
            for source in langs.source:
                for target in langs.target:
                    if source != target:
                        table.setdefault((source, target), Pair(name, source, target))
            continue
        pair = given.get(name) or name_pair(name)
        if pair is not None:
            table.setdefault(pair, Pair(name, None, None))
    return table


@endpoint
async def languages(request: Request) -> Response:
    service: Service = request.app.state.service
    service.check_ready()
    targets: Dict[str, List[str]] = {}
    for source, target in service.languages:
        targets.setdefault(source, []).append(target)
    # LibreTranslate lists every language with the targets it translates into; we know codes, not names
    codes = sorted(set(targets) | {t for ts in targets.values() for t in ts})
    return JSONResponse([{"code": c, "name": c, "targets": sorted(targets.get(c, []))} for c in codes])


async def fields(request: Request) -> Tuple[Dict[str, Any], bool]:
    """The request's fields as LibreTranslate reads them, and whether they came as JSON."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
        from .app import json_object
        return await json_object(request), True
    values: Dict[str, Any] = dict(request.query_params)
    form = await request.form()
    values.update({k: v for k, v in form.items() if isinstance(v, str)})
    return values, False


def _missing(name: str) -> HTTPError:
    return HTTPError(400, f"Invalid request: missing {name} parameter")


def pick_pair(service: Service, source: str, target: str) -> Tuple[str, Pair]:
    """The pair for source/target; source "auto": the one source language that translates into target."""
    service.check_ready()
    if source == "auto":
        sources = sorted({s for s, t in service.languages if t == target})
        if len(sources) != 1:
            known = ", ".join(sources) or "none"
            raise HTTPError(400, f"source 'auto' needs language detection, which this server does not do; "
                                 f"name the source language (into {target!r}: {known})")
        source = sources[0]
    pair = service.languages.get((source, target))
    if pair is None:
        codes = {c for st in service.languages for c in st}
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
    if not is_json:
        q = "\n".join(q.splitlines())
    batch = isinstance(q, list)
    texts = service.check_texts(q if batch else [q], "q")
    chars, limit = sum(map(len, texts)), service.settings.char_limit
    if chars > limit:
        raise HTTPError(400, f"Invalid request: request ({chars}) exceeds text limit ({limit})")
    source, pair = pick_pair(service, source, target)
    model, scheduler = service.scheduler(pair.model)
    try:
        layouts = [layout(text, language=source, format=text_format) for text in texts]
    except DocumentError as e:
        raise HTTPError(400, f"Invalid request: q: {e}") from None
    sentences = [s for lay in layouts for s in lay.sentences]
    options: Dict[str, Any] = {}
    if pair.source_lang is not None:
        options.update(source_lang=pair.source_lang, target_lang=pair.target_lang)
    if n_alt:
        beam = {**scheduler.translator.package.generation}.get("beam_size", 4)
        options.update(num_hypotheses=n_alt + 1, beam_size=max(beam, n_alt + 1))
    options.update(alignment_options(scheduler.translator, layouts))
    results = await service.run(request, model, scheduler, TRANSLATE, sentences, options) if sentences else []
    best, alternatives = documents_answer(layouts, translations(scheduler.translator, sentences, results,
                                                                pair.source_lang, pair.target_lang), n_alt)
    answer: Dict[str, Any] = {"translatedText": best if batch else best[0]}
    if values.get("source") == "auto":
        detected = {"confidence": 100.0, "language": source}
        answer["detectedLanguage"] = [detected] * len(texts) if batch else detected
    if n_alt:
        answer["alternatives"] = alternatives if batch else alternatives[0]
    return Answer(answer)


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
