"""How texts become batches of ids: tokenized from a bounded prefix, then sorted and cut into batches."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from .options import MAX_CHARS_PER_TOKEN, DecodingOptions, TranslationOptions

if TYPE_CHECKING:
    from .package.tokenizer import PackageTokenizer

ENCODE_CHUNK = 1024             # texts tokenized at once: their Encodings (~2 kB each) are never all held


def split_batches(lengths: Sequence[int], max_batch_size: int, batch_type: str) -> List[List[int]]:
    """Indices sorted by length (ascending, stable), cut into batches of at most max_batch_size
    examples, or of at most max_batch_size padded source tokens (batch_type "tokens"); 0 = one batch.
    An example alone over the token budget still forms a batch."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if max_batch_size == 0:
        return [order] if order else []
    batches: List[List[int]] = []
    current: List[int] = []
    for i in order:
        size = len(current) + 1 if batch_type == "examples" else (len(current) + 1) * lengths[i]
        if current and size > max_batch_size:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def is_blank(text: str) -> bool:
    """Nothing to translate: empty or whitespace only (str.isspace), the empty hypothesis."""
    return not text or text.isspace()                   # no copy of a long text


def max_source_chars(max_input_length: int) -> int:
    """The most characters of one text that `token_ids` reads for max_input_length tokens."""
    return max_input_length * MAX_CHARS_PER_TOKEN


def token_ids(tokenizer: PackageTokenizer, texts: Sequence[str], limit: int) -> Tuple[List[List[int]], List[bool]]:
    """(ids, cut) per text: the ids of a prefix of it that holds its first `limit` tokens, and whether
    the prefix is shorter than the text. The prefix starts at `limit` characters and doubles until it
    yields 2 x limit tokens (the pieces its cut splits lie past the first `limit`, so these are the
    whole text's), or holds the whole text, or max_source_chars(limit) characters."""
    ids: List[List[int]] = [[] for _ in texts]
    cut = [False] * len(texts)
    todo, size = list(range(len(texts))), limit
    while todo:
        longer = []
        for start in range(0, len(todo), ENCODE_CHUNK):
            chunk = todo[start:start + ENCODE_CHUNK]
            for i, enc in zip(chunk, tokenizer.encode_batch([texts[i][:size] for i in chunk])):
                if len(texts[i]) > size and len(enc.ids) < 2 * limit and size < max_source_chars(limit):
                    longer.append(i)
                else:
                    ids[i], cut[i] = enc.ids, len(texts[i]) > size
        todo, size = longer, 2 * size
    return ids, cut


@dataclass
class TranslateRequest:
    """translate_batch's arguments checked and its texts tokenized (Translator.prepare_batch): what decoding needs,
    and what Translator.batch_results needs to turn the hypotheses into TranslationResults."""
    texts: List[str]
    call: TranslationOptions                 # translate_batch's own keywords
    options: DecodingOptions                 # as given (with the package's defaults): what the results show
    decode_options: DecodingOptions          # as decoded (return_alignment needs the attention)
    todo: List[int]                          # the texts decoded (not blank), in order
    sources: List[List[int]]                 # their source ids (EOS last)
    truncated: List[bool]                    # cut to max_input_length
    prefixes: Optional[List[List[int]]]      # per source, its target prefix ids
    phrases: Optional[List[List[List[int]]]]     # per text, its constraint phrases' ids

    @property
    def source_phrases(self) -> Optional[List[List[List[int]]]]:
        """Per source (todo), its phrases."""
        return None if self.phrases is None else [self.phrases[i] for i in self.todo]
