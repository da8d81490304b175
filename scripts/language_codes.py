"""Derives runtime/package/languages.py's TO_639_1 from langcodes (the serve extra): every ISO 639-2/3 code, and every
retired two-letter one, that names a language with an ISO 639-1 code -> that code. Macrolanguages' members map to
the macrolanguage (cmn, the code of OPUS-MT's Chinese tags, -> zh), as langcodes' standardize_tag(macro=True) does;
Tagalog stays tl (langcodes follows CLDR, which writes it fil, a code no model or LibreTranslate client uses).

    .venv/bin/python scripts/language_codes.py     # prints the table; tests/runtime/package/test_languages.py checks it is current
"""
from __future__ import annotations

import itertools
import string
from typing import Dict


def derive() -> Dict[str, str]:
    import langcodes

    table: Dict[str, str] = {}
    for code in map("".join, itertools.product(string.ascii_lowercase, repeat=3)):
        tag = langcodes.standardize_tag(code, macro=True)
        if len(tag) == 2:
            table[code] = tag
    for code in map("".join, itertools.product(string.ascii_lowercase, repeat=2)):
        tag = langcodes.standardize_tag(code, macro=True)
        if len(tag) == 2 and tag != code:
            table[code] = tag                                  # a retired code: iw -> he, in -> id
        elif tag == code or tag == "fil":
            try:
                table.setdefault(langcodes.Language.get(code, normalize=False).to_alpha3(), code)
            except LookupError:
                pass
    return dict(sorted(table.items()))


def literal(table: Dict[str, str], width: int = 120) -> str:
    lines, line = [], "   "
    for key, value in table.items():
        item = f" {key!r}: {value!r},"
        if len(line) + len(item) > width:
            lines.append(line)
            line = "   "
        line += item
    return "TO_639_1 = {\n" + "\n".join(lines + [line]) + "\n}"


if __name__ == "__main__":
    print(literal(derive()))
