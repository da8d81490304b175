"""Documents translated: a document taken apart by its format's rules (text.py: plain text; html_document.py: HTML),
its sentences translated as one `translate_batch`, and put back together (`Layout.join`)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence

from .html_document import html_layout
from .text import DocumentError, Layout, Translation, text_layout
from ..options import DecodingOptions, TranslationOptions

FORMATS = ("text", "html")          # what a document is written in: LibreTranslate's `format` values


def layout(text: str, split_sentences: bool = True, language: Optional[str] = None, format: str = "text") -> Any:
    """`text` taken apart by its format's rules (a Layout: text.py's; format="html": html_document.py's, an
    HtmlLayout); language: the source language's code (for the splitter's rules, splitter_language). DocumentError
    for a control character or a line over MAX_PARAGRAPH_CHARS (and what html_document.py refuses)."""
    if not isinstance(text, str):
        raise TypeError(f"a document must be a str, got {type(text).__name__}")
    if format not in FORMATS:
        raise DocumentError(f"format {format!r} is unknown: a document is one of {', '.join(FORMATS)}")
    if format == "html":
        return html_layout(text, split_sentences, language)
    return text_layout(text, split_sentences, language)


def _per_document(name: str, value: Optional[Sequence[Any]], n: int) -> None:
    """A per-document option (target_prefix, constraints): None, or a list of one entry per document."""
    if value is not None and (isinstance(value, (str, bytes)) or len(value) != n):
        raise ValueError(f"{name} must be a list with one entry per document ({n})")


def _per_sentence(value: Optional[Sequence[Any]], layouts: Sequence[Layout]) -> Optional[List[Any]]:
    """A per-document entry (target_prefix, constraints) as translate_batch's per-text one: each sentence gets its
    document's."""
    if value is None:
        return None
    return [value[i] for i, lay in enumerate(layouts) for _ in lay.sentences]


def alignment_options(translator: Any, layouts: Sequence[Any]) -> Dict[str, Any]:
    """The translate_batch options a document's join needs: return_alignment where a sentence holds markup to place
    and the model has attention (without it, the rule without alignments)."""
    if translator.engine.has_attention and any(getattr(lay, "needs_alignment", False) for lay in layouts):
        return {"return_alignment": True}
    return {}


def translations(translator: Any, sentences: Sequence[str], results: Sequence[Any],
                 source_lang: Optional[str] = None, target_lang: Optional[str] = None) -> List[List[Translation]]:
    """Per result, its hypotheses as Translations (with their alignments and the source words they number, where
    the results have alignments)."""
    out = []
    for sentence, r in zip(sentences, results):
        if r.alignment is None:
            out.append([Translation(h) for h in r.hypotheses])
            continue
        words = translator.source_words(sentence, source_lang, target_lang)
        out.append([Translation(h, a, words) for h, a in zip(r.hypotheses, r.alignment)])
    return out


def splitter_language(translator: Any, language: Optional[str], source_lang: Optional[str]) -> Optional[str]:
    """The sentence splitter's language: `language`, else the call's source_lang, else the package's one source
    language (None: the splitter's default)."""
    if language is not None:
        return language
    languages = translator.package.languages
    return source_lang or (languages.default_source or (languages.source[0] if len(languages.source) == 1 else None)
                           if languages is not None else None)


def translate_documents(translator: Any, documents: Sequence[str], split_sentences: bool = True,
                        language: Optional[str] = None, target_prefix: Optional[Sequence[Any]] = None,
                        constraints: Optional[Sequence[Any]] = None, format: str = "text",
                        **options: Any) -> List[str]:
    """Translate documents (plain text: paragraphs, lists, blank lines; format="html": HTML, its markup kept) with a
    Translator: each taken apart by the module's rules (`layout`), the sentences of all of them translated as one
    `translate_batch(**options)` (every option applies; target_prefix and constraints are per document, for each of
    its sentences), and put back together. language: the source language's code for the sentence splitter
    (default: options' source_lang, else the package's one source language, else "en"). Returns one string per
    document: its best translation."""
    language = splitter_language(translator, language, options.get("source_lang"))
    layouts = [layout(d, split_sentences, language, format) for d in documents]
    _per_document("target_prefix", target_prefix, len(layouts))
    _per_document("constraints", constraints, len(layouts))
    options = {**alignment_options(translator, layouts), **options}
    call, decoding = translator.check_options(len(layouts), target_prefix=target_prefix, constraints=constraints,
                                              **options)
    return join_translations(translator, layouts, call, decoding)


def join_translations(translator: Any, layouts: Sequence[Layout], call: TranslationOptions,
                      decoding: DecodingOptions) -> List[str]:
    """The documents taken apart as `layouts`, their sentences translated as one batch with the records that
    check_options made of the documents' options (call's target_prefix and constraints one entry per document, which
    each of its sentences gets), and put back together: one string per document, its best translation."""
    sentences = [s for lay in layouts for s in lay.sentences]
    if not sentences:
        return [lay.join([]) for lay in layouts]
    call = replace(call, target_prefix=_per_sentence(call.target_prefix, layouts),
                   constraints=_per_sentence(call.constraints, layouts))
    results = translator.run_batch(sentences, call, decoding)
    best = iter(t[0] for t in translations(translator, sentences, results, call.source_lang, call.target_lang))
    return [lay.join([next(best) for _ in lay.sentences]) for lay in layouts]


def translate_document(translator: Any, document: str, split_sentences: bool = True, language: Optional[str] = None,
                       format: str = "text", **options: Any) -> str:
    """One document's translation (translate_documents); `translator.translate_batch` stays for sentences."""
    return translate_documents(translator, [document], split_sentences, language, format=format, **options)[0]
