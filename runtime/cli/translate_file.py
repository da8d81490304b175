"""`seq2onnx translate-file INPUT OUTPUT`: a file (.txt, .html, .srt, .docx) translated whole, in its format
(documents/files.py)."""
from __future__ import annotations

import argparse
from typing import List

from ..documents.files import FileError, FileLimits, file_format, translate_file_with
from ..documents.text import require_splitter
from ..errors import Seq2OnnxError
from .cli_io import PROG, open_output, open_path
from .commands import cli_message, command_parser, load_translator, translate_options
from .main import terminate_raises

NAME = "seq2onnx translate-file"
# `seq2onnx translate`'s flags that are for lines of sentences, not a file's documents: hidden and refused
NOT_FILE_FLAGS = {"input": "--input", "output": "--output", "plot_attention": "--plot-attention",
                  "num_hypotheses": "--n-best", "scores": "--scores", "return_alignment": "--alignment",
                  "target_prefix": "--target-prefix", "constraints": "--constraint"}
FILE_FORMAT = """\
INPUT: a .txt (one document: documents/text.py's rules, layout kept), .html (the text between the tags), .srt (each
cue's text lines one document; numbers and timings kept byte for byte) or .docx (each paragraph's text runs; a
translated word keeps the formatting of the source word it is aligned to), by its extension; text files UTF-8.
OUTPUT: the translated file, in INPUT's format, replaced when it is written (as `seq2onnx translate --output`;
never INPUT, by any path or link). A file over --max-file-bytes, or holding more than --max-file-chars characters
of text, a file that breaks its format (an .srt cue without its timing, a .docx that is no zip or a zip bomb),
is refused: one line, exit 2.
"""


def _file_parser() -> argparse.ArgumentParser:
    p = command_parser(NAME, "Translate a file (.txt, .html, .srt, .docx) with a model package.", FILE_FORMAT,
                       NOT_FILE_FLAGS)
    p.add_argument("file_input", metavar="INPUT", help="the file to translate (below)")
    p.add_argument("file_output", metavar="OUTPUT", help="the translated file to write (below)")
    g = p.add_argument_group("files")
    g.add_argument("--no-split", dest="split_sentences", action="store_false",
                   help="translate each paragraph (line, cue line, run group) whole, not sentence by sentence")
    g.add_argument("--max-file-bytes", type=int, default=FileLimits.max_bytes,
                   help=f"the largest INPUT, in bytes (default {FileLimits.max_bytes})")
    g.add_argument("--max-file-chars", type=int, default=FileLimits.max_chars,
                   help=f"the most characters of text INPUT may hold (default {FileLimits.max_chars})")
    return p


def translate_file_main(argv: List[str]) -> int:
    PROG["name"] = NAME
    args, decoding = translate_options(argv, _file_parser)
    given = [flag for dest, flag in NOT_FILE_FLAGS.items()
             if getattr(args, dest, None) not in (None, False, 1)]
    if given:
        raise Seq2OnnxError(f"{', '.join(given)}: not an option of translate-file (its INPUT and OUTPUT are "
                            f"files; the others are for lines of sentences: `seq2onnx translate`)")
    for flag in ("max_file_bytes", "max_file_chars"):
        if getattr(args, flag) < 1:
            raise Seq2OnnxError(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    fmt = file_format(args.file_input)
    if args.split_sentences:
        require_splitter()                              # a missing splitter, said before the model loads
    limits = FileLimits(args.max_file_bytes, args.max_file_chars)
    with terminate_raises():
        source = open_path("INPUT", args.file_input, "rb")
        try:
            data = source.read(limits.max_bytes + 1)
            if len(data) > limits.max_bytes:
                raise FileError(f"INPUT {args.file_input}: more than {limits.max_bytes:,} bytes (--max-file-bytes)")
            with open_output(args.file_output, "OUTPUT", source=source,
                             source_name=f"INPUT {args.file_input}") as out:
                tr, _ = load_translator(args)
                try:
                    call, options = tr.check_options(1, max_batch_size=args.max_batch_size, batch_type=args.batch_type,
                                                     max_input_length=args.max_input_length, **decoding)
                    out.write(translate_file_with(tr, data, fmt, call, options, limits, call.source_lang,
                                                  args.split_sentences))
                except ValueError as e:                     # FileError, DocumentError, an option translate_batch refuses
                    raise Seq2OnnxError(f"INPUT {args.file_input}: {cli_message(e)}") from None
        finally:
            source.close()
    return 0
