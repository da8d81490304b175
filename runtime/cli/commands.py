"""`seq2onnx translate` and `seq2onnx score`: the runtime's command line (its lines in and out: cli_io.py;
`seq2onnx info`: info.py)."""
from __future__ import annotations

import argparse
import codecs
import functools
import itertools
import re
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from .main import OneLineParser, terminate_raises
from .cli_io import (PROG, UTF8_MAX_BYTES, Progress, decode_line, open_output, open_path, read_lines, stdin_bytes,
                     warn)
from ..decode.alignment import format_alignment
from ..errors import Seq2OnnxError, printable
from ..decode.constraints import check_work, normalize_phrases, require_beam
from ..options import (MAX_CHARS_PER_TOKEN, Arg, DecodingOptions, NamesArgs, TranslationOptions, check_text, samples,
                       with_defaults)
from ..option_table import BOOL, OPTIONS

if TYPE_CHECKING:                       # the Translator (onnxruntime) is imported once a model is loaded
    from ..results import TranslationResult
    from ..translator import Translator

# translate's options as the Translator checked them (Translator.check_options) for one line: what each line is
# translated with (translate_texts)
Records = Tuple[TranslationOptions, DecodingOptions]

# the help sections of option_table's groups
SECTIONS = {"batching": "input and batching", "decoding": "decoding (as the Python API, with dashes)",
            "generation": "generation as transformers' generate() does it (a converted model's defaults: "
                          "`seq2onnx info`)",
            "attention": "attention (format-2 packages)"}
def _ranges(parts: List[str], width: int = 100) -> str:
    """Parts joined by "; " into indented lines of at most `width` characters, none broken inside."""
    lines = [""]
    for part in parts:
        if lines[-1] and len(lines[-1]) + len(part) + 4 > width:
            lines.append("")
        lines[-1] += part + "; "
    return "\n".join("  " + line.rstrip() for line in lines)[:-1] + "."


RANGES = _ranges([f"{o.flag} {o.flag_range or o.range}" for o in OPTIONS if o.flag is not None and o.range]
                 + ["--intra-threads 0..4 x CPU cores", "--inter-threads 1..4 x CPU cores"])

TRANSLATE_FORMAT = f"""\
input: one source per line (split at \\n; a trailing \\r is dropped), UTF-8, from stdin or --input
(a file, /dev/stdin, a FIFO, <(command)); a UTF-8 BOM that opens the input is dropped.
  - invalid UTF-8 bytes are replaced with U+FFFD (a warning on stderr names the line);
  - an empty or blank (whitespace-only) line is not translated: one empty hypothesis, score 0
    (one output line, also with --n-best);
  - characters the model's tokenizer never saw (emoji, CJK, control characters, NUL) become its
    <unk> piece: the line is translated, with a warning naming it (the input lies outside what the
    model learned; TranslationResult.source_unknown_tokens counts such pieces);
  - a line over --max-input-length tokens (default: the model's max_positions) is cut to that
    length, EOS kept (a warning names the line); the other lines are not affected. Only the first
    {UTF8_MAX_BYTES * MAX_CHARS_PER_TOKEN} x --max-input-length bytes of a line are read, and {MAX_CHARS_PER_TOKEN} x --max-input-length characters
    tokenized (no more can fit; a warning names the line): a huge line costs no more memory or
    time than a long one.
output: lines in input order, written (and flushed) batch by batch, to stdout or --output FILE.
A regular FILE (or the file a symlink FILE points to) is replaced when everything is written: by a
temporary file beside it, with FILE's mode (a new FILE: 0666 less the umask), removed on an error,
Ctrl-C, SIGTERM or SIGHUP. Anything else (a device, a FIFO, /dev/stdout) is written to directly.
A folder, a FILE that cannot be written, or the input file itself (by any path or link, or
stdout redirected to it) is refused before any work. Line breaks inside a translation become
spaces; on a terminal, control characters are shown as \\xNN (to a file or a pipe, the bytes
are exact).
  default           TEXT                        one line per input
  --scores          SCORE<TAB>TEXT              SCORE = normalized score (score / length ** length_penalty)
  --n-best K        LINE<TAB>TEXT               up to K lines per input, best first, LINE = 1-based input line
  --n-best K --scores  LINE<TAB>SCORE<TAB>TEXT
  --alignment       TEXT becomes TEXT ||| 0-0 1-2 ... (source word - target word, Marian's and fairseq's format)
  --plot-attention DIR  also writes DIR/line-N.png, the best translation's attention over the source words
options and their ranges (a value outside is a one-line error, exit 2, before anything is read):
{RANGES}
exit status: 0 done; 2 a bad option, input file or model folder (one line on stderr naming it
and the fix); 1 an unexpected error (one line; SEQ2ONNX_DEBUG=1 shows the traceback); 128 + N
stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP); 141 (128 + SIGPIPE) the reader of the
output went away (`| head`), quietly, as `cat` ends. Messages on stderr show control characters as
\\xNN.
"""


def _model_parser(prog: str, description: str, epilog: str, reads: str, writes: str) -> argparse.ArgumentParser:
    """The arguments `translate` and `score` share: the model, where lines come from and go to, the batching."""
    p = OneLineParser(prog=prog, description=description, epilog=epilog,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir", metavar="MODEL_DIR", help="package folder written by `seq2onnx export`")
    p.add_argument("--input", "-i", metavar="FILE", help=f"read {reads} from FILE (default: stdin)")
    p.add_argument("--output", "-o", metavar="FILE", help=f"write {writes} to FILE (default: stdout)")
    g = p.add_argument_group("model")
    g.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    g.add_argument("--compute-type", default="default", choices=["default", "float32", "int8", "float16"])
    g.add_argument("--intra-threads", type=int, default=0, help="onnxruntime intra-op threads (0: its default)")
    g.add_argument("--inter-threads", type=int, default=1)
    g.add_argument("--no-verify", action="store_true", help="skip the SHA-256 check of the package files")
    _add_flags(p, ["batching"])
    return p


def translate_parser() -> argparse.ArgumentParser:
    p = _model_parser("seq2onnx translate", "Translate lines with a model package.", TRANSLATE_FORMAT,
                      "sources", "translations")
    sections = _add_flags(p, ["decoding", "generation", "attention"])
    d, a = sections["decoding"], sections["attention"]
    d.add_argument("--no-relative-length", dest="max_length_a", action="store_const", const=None,
                   help="only --max-decoding-length limits a translation (max_length_a=0, max_length_b=None)")
    d.add_argument("--scores", action="store_true", help="prefix each hypothesis with its normalized score")
    a.add_argument("--plot-attention", metavar="DIR",
                   help="write one heatmap PNG per input line into DIR (made if missing; needs matplotlib: "
                        'pip install matplotlib)')
    return p


def command_parser(prog: str, description: str, epilog: str, hidden: Iterable[str]) -> argparse.ArgumentParser:
    """translate's parser under another command's name (translate-file, translate-dataset), the flags that command
    refuses (`hidden`, dests) left out of its help: the options stay parsed and checked by translate_options."""
    p = translate_parser()
    p.prog, p.description, p.epilog = prog, description, epilog
    hide = set(hidden)
    for action in p._actions:
        if action.dest in hide:
            action.help = argparse.SUPPRESS
    return p


def _add_flags(p: argparse.ArgumentParser, groups: List[str]) -> Dict[str, Any]:
    """option_table's flags of these groups, in its order, each in its help section (-> the sections): dest the
    API's name, type from its kind, default the API's (none where the table says flag_unset), help, value name and
    repetition the table's."""
    sections = {g: p.add_argument_group(SECTIONS[g]) for g in groups}
    for o in OPTIONS:
        if o.flag is None or o.group not in sections:
            continue
        kind = o.kind
        if kind is BOOL:
            spelled: Dict[str, Any] = dict(action="store_true")
        elif kind.choices is not None:
            spelled = dict(choices=kind.choices)
        elif kind.parse in (int, float, str):               # argparse's own "invalid int value: 'abc'"
            spelled = dict(type=kind.parse)
        elif kind.parse is None:                            # a per-text option: one TEXT, for every line
            spelled = dict(type=str)
        else:
            spelled = dict(type=_flag_type(kind.parse))
        if o.repeated:
            spelled["action"] = "append"
        if o.metavar is not None:
            spelled["metavar"] = o.metavar
        shown = str(o.default).lower() if isinstance(o.default, bool) else o.default      # as the flag spells it
        notes = ([o.name] if o.flag != "--" + o.name.replace("_", "-") else []) + (
            [] if o.default is None or kind is BOOL else [f"default {shown}"])
        help = o.flag_help or o.help + (f" ({'; '.join(notes)})" if notes else "")
        sections[o.group].add_argument(o.flag, dest=o.name, default=None if o.flag_unset else o.default, **spelled,
                                       help=help.replace("%", "%%"))
    return sections


def _flag_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A kind's parse as a flag's type: its "must be ..." said as argparse says it ("argument --x: must be ...")."""
    def flag_type(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return flag_type


@functools.lru_cache(maxsize=None)
def _flags() -> Dict[str, str]:
    """The API's argument names -> the flags that set them: each flag's dest is the API's name (option_table's
    --n-best sets num_hypotheses, --constraint constraints; the Translator's --compute-type compute_type; `score`
    has no flag of its own)."""
    flags: Dict[str, str] = {}
    for action in translate_parser()._actions:
        if action.option_strings:
            flags.setdefault(action.dest, max(action.option_strings, key=len))
    return flags


def cli_message(error: Union[Exception, str]) -> str:
    """An error or warning of the Python API as the command line says it: the arguments an options.OptionError or
    OptionWarning names, named by their flags."""
    if isinstance(error, NamesArgs):
        return error.render(lambda name: _flags().get(name, name))
    return str(error)


# every character str.splitlines() breaks at: none may split one output line into two
LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def format_output(number: int, texts: List[str], scores: List[float], n_best: int, with_scores: bool,
            terminal: bool = False) -> bytes:
    """Output lines of one input; for a terminal, control characters are shown as \\xNN."""
    lines = []
    for text, score in zip(texts, scores):
        text = LINE_BREAKS.sub(" ", text)
        if terminal:
            text = printable(text)
        fields = ([str(number)] if n_best > 1 else []) + ([f"{score:.6f}"] if with_scores else []) + [text]
        lines.append("\t".join(fields) + "\n")
    return "".join(lines).encode("utf-8")


DOCUMENT_FORMAT = """\
--document: the input is one document (documents/text.py's rules): each line a paragraph, split into sentences
(the sentencex package: pip install 'seq2onnx[documents]'; --no-split: each line translated whole), whose
translations are written back with the document's line breaks (LF, CRLF or CR), blank lines, indentation,
list markers ("- ", "* ", "1. ") and spaces. Read and written a block of --max-batch-size lines at a time.
A line over {chars} characters, or a control character (but TAB, LF, CR), stops the command (exit 2,
naming the line); the blocks before it are written. --n-best, --scores, --alignment and --plot-attention
are for lines of sentences, not documents.
--format html: the input is one HTML document (runtime/documents/html_document.py's rules): the text between its tags is
translated, its markup kept (inline tags placed by the translation's alignment); read whole, at most {html_chars}
characters.
"""


def _translate_cli_parser() -> argparse.ArgumentParser:
    """`seq2onnx translate`'s parser: translate_parser's options (which translate-dataset shares) and documents."""
    from ..documents.text import MAX_PARAGRAPH_CHARS
    from ..documents.translate import FORMATS
    from ..documents.html_document import MAX_HTML_CHARS
    p = translate_parser()
    p.epilog = f"{p.epilog}{DOCUMENT_FORMAT.format(chars=MAX_PARAGRAPH_CHARS, html_chars=MAX_HTML_CHARS)}"
    g = p.add_argument_group("documents")
    g.add_argument("--document", action="store_true",
                   help="translate the input as one document: paragraphs and sentences, layout kept (below)")
    g.add_argument("--no-split", dest="split_sentences", action="store_false",
                   help="with --document: translate each line whole, not sentence by sentence")
    g.add_argument("--format", choices=FORMATS, default="text",
                   help="html: the input is one HTML document, its markup kept (below); default text")
    return p


def translate_main(argv: List[str]) -> int:
    PROG["name"] = "seq2onnx translate"
    args, decoding = translate_options(argv, _translate_cli_parser)
    if args.document or not args.split_sentences or args.format == "html":
        return _translate_document(args, decoding)
    if args.plot_attention is not None:
        from .attention_plot import check_folder
        check_folder(args.plot_attention)              # made by check_attention, once the run will proceed

    def start(tr: Translator, limit: int) -> Callable[[List[Tuple[int, str]], BinaryIO], None]:
        if args.return_alignment or args.plot_attention is not None:
            check_attention(tr, args)
        records = translation_records(tr, args, decoding)
        return lambda block, out: _translate_and_plot(tr, block, records, args, limit, out)

    return _run_lines(args, lambda tr, limit: (source_line_bytes(limit), None), start)


def translate_options(argv: List[str], parser: Callable[[], argparse.ArgumentParser] = translate_parser
                      ) -> Tuple[Any, Dict[str, Any]]:
    """`seq2onnx translate`'s command line (MODEL_DIR and its flags) parsed by a parser that `parser` makes (one with
    more arguments: `translate-dataset`'s, runtime/ray/cli.py) and checked: its arguments, and the translate_batch
    keywords of the decoding flags it names."""
    args = parser().parse_args(argv)
    decoding = flag_decoding(args)
    _check_options(args, **with_defaults(decoding))
    # only the options the command line names: the package's generation defaults (a converted model's) apply
    # to the others, as in the API (--no-relative-length names max_length_a and max_length_b)
    given = _given(argv, parser)
    decoding = {k: v for k, v in decoding.items()
                if k in given or (k == "max_length_b" and "max_length_a" in given and args.max_length_a is None)}
    decoding.update({k: getattr(args, k) for k in ("source_lang", "target_lang") if getattr(args, k) is not None})
    return args, decoding


def flag_decoding(args: argparse.Namespace) -> Dict[str, Any]:
    """The decoding options the flags say, as the API's keywords: a flag unset by default (option_table's flag_unset:
    --beam-size, whose value the API's rule picks when sampling) only when given; --no-relative-length as
    max_length_a=0, max_length_b=None."""
    decoding = {o.name: getattr(args, o.name) for o in OPTIONS if o.decoding and o.flag is not None
                and not (o.flag_unset and getattr(args, o.name) is None)}
    if args.max_length_a is None:
        decoding.update(max_length_a=0.0, max_length_b=None)
    return decoding


def source_line_bytes(limit: int) -> int:
    """The bytes of an input line that `translate` reads with a source limit of `limit` tokens (TRANSLATE_FORMAT)."""
    from ..text_input import max_source_chars
    return UTF8_MAX_BYTES * max_source_chars(limit)


def _given(argv: List[str], parser: Callable[[], argparse.ArgumentParser] = translate_parser) -> set:
    """The dests of the options that argv names (parsed again, by a new parser, with every default suppressed)."""
    p = parser()
    for action in p._actions:
        action.default = argparse.SUPPRESS
    return set(vars(p.parse_args(argv)))


def translation_records(tr: Translator, args: argparse.Namespace, decoding: Dict[str, Any]) -> Records:
    """`translate`'s options (args, decoding: translate_options) as the records the Translator makes of them
    (check_options), for one line: its --target-prefix and --constraint one entry, which translate_texts gives every
    line. A bad option: a Seq2OnnxError naming its flag, once the model is loaded and before any line."""
    try:
        return tr.check_options(1, max_batch_size=args.max_batch_size, batch_type=args.batch_type,
                                max_input_length=args.max_input_length, return_scores=True,
                                target_prefix=None if args.target_prefix is None else [args.target_prefix],
                                constraints=None if args.constraints is None else [args.constraints],
                                return_alignment=args.return_alignment,
                                return_attention=getattr(args, "plot_attention", None) is not None, **decoding)
    except ValueError as e:
        raise Seq2OnnxError(cli_message(e)) from e


def check_attention(tr: Translator, args: argparse.Namespace) -> None:
    """--alignment / --plot-attention need a format-2 package: said once the model is loaded, before any line;
    then --plot-attention's DIR is made."""
    if not tr.engine.has_attention:
        raise tr.engine.no_attention_error()
    if args.plot_attention is not None:
        from .attention_plot import make_folder
        make_folder(Path(args.plot_attention))


def _translate_and_plot(tr: Translator, block: List[Tuple[int, str]], records: Records,
                        args: argparse.Namespace, limit: int, out: BinaryIO) -> None:
    """A block's translations written and flushed, then its --plot-attention pictures (attention_plot.py):
    a picture never holds back or loses a translation."""
    results: List[TranslationResult] = []
    out.write(_translate_block(tr, block, records, args, limit, out.isatty(), results))
    out.flush()
    if args.plot_attention is not None:
        from .attention_plot import plot_block
        plot_block(tr, block, results, Path(args.plot_attention), args.max_input_length, warn)


def _check_options(args: argparse.Namespace, **decoding: Any) -> None:
    """Options the API would refuse, refused before anything is opened or read (decoding: the API's keywords, its
    defaults applied: options.with_defaults)."""
    if getattr(args, "constraints", None) and samples(args.sampling_topk):   # the API's test of "sampling"
        raise Seq2OnnxError(f"--constraint needs beam search, and --sampling-topk {args.sampling_topk} samples: "
                            "drop one of them")
    if args.max_batch_size < 1:
        raise Seq2OnnxError(f"--max-batch-size must be >= 1, got {args.max_batch_size}")
    try:
        if getattr(args, "constraints", None):                  # what needs no model: the rest, once it is loaded
            normalize_phrases([args.constraints], 1)
            require_beam(decoding.get("beam_size", DecodingOptions.beam_size))
        if getattr(args, "target_prefix", None) is not None:
            check_text(Arg("target_prefix"), args.target_prefix)
        DecodingOptions.from_kwargs(**decoding)
    except ValueError as e:
        raise Seq2OnnxError(cli_message(e)) from e


def _translate_document(args: argparse.Namespace, decoding: Dict[str, Any]) -> int:
    """`translate --document`: the input's lines in blocks of --max-batch-size, each block a document (documents/text.py:
    its lines are its paragraphs, so a block's translation is the whole document's part), written as it is done."""
    from ..documents.text import MAX_PARAGRAPH_CHARS
    from ..documents.translate import layout
    if not args.document and args.format != "html":
        raise Seq2OnnxError("--no-split is an option of --document (without it, each line is one source, not split)")
    sentence_flags = [flag for flag, given in (("--n-best", args.num_hypotheses > 1), ("--scores", args.scores),
                                               ("--alignment", args.return_alignment),
                                               ("--plot-attention", args.plot_attention is not None)) if given]
    if sentence_flags:
        raise Seq2OnnxError(f"{', '.join(sentence_flags)}: an option for lines of sentences, not for --document")
    if args.split_sentences:
        from ..documents.text import require_splitter
        require_splitter()                              # a missing splitter, said before the model loads
    line_bytes = UTF8_MAX_BYTES * MAX_PARAGRAPH_CHARS
    with terminate_raises():
        source = stdin_bytes() if args.input is None else open_path("--input", args.input, "rb")
        try:
            with open_output(args.output, source=source,
                             source_name="stdin" if args.input is None else f"--input {args.input}") as out:
                tr, limit = load_translator(args)
                records = translation_records(tr, args, decoding)
                language = records[0].source_lang
                if args.format == "html":
                    out.write(_translate_html(tr, source, args, records).encode("utf-8"))
                    return 0
                lines = document_lines(source, line_bytes)
                for block in iter(lambda: list(itertools.islice(lines, args.max_batch_size)), []):
                    layouts = []
                    for n, line in block:
                        try:
                            layouts.append(layout(line, args.split_sentences, language))
                        except ValueError as e:                 # its line, as the document numbers it
                            raise Seq2OnnxError(re.sub(r"^line \d+", f"line {n}", str(e))) from None
                    numbers = [n for (n, _), lay in zip(block, layouts) for _ in lay.sentences]
                    sentences = [t for lay in layouts for t in lay.sentences]
                    results = translate_texts(tr, sentences, records) if sentences else []
                    for n, text, r in zip(numbers, sentences, results):
                        output_lines(n, text, r, args, limit)       # its warnings, naming the line
                    best = iter(r.hypotheses[0] for r in results)
                    out.write("".join(lay.join([next(best) for _ in lay.sentences]) for lay in layouts)
                              .encode("utf-8"))
                    out.flush()
        finally:
            if args.input is not None:
                source.close()
    return 0


def _translate_html(tr: Translator, source: BinaryIO, args: argparse.Namespace, records: Records) -> str:
    """`translate --format html`: the input read whole (at most MAX_HTML_CHARS characters' bytes), translated."""
    from ..documents.translate import alignment_options, layout, translations
    from ..documents.html_document import MAX_HTML_CHARS
    max_bytes = UTF8_MAX_BYTES * MAX_HTML_CHARS
    raw = source.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise Seq2OnnxError(f"the input is longer than {max_bytes} bytes; an HTML document may hold at most "
                            f"{MAX_HTML_CHARS} characters: translate it in parts")
    text = decode_line(raw[len(codecs.BOM_UTF8):] if raw.startswith(codecs.BOM_UTF8) else raw, 1)
    call, decoding = records
    lay = layout(text, args.split_sentences, call.source_lang, format="html")
    sentences = list(lay.sentences)
    if alignment_options(tr, [lay]):
        call = replace(call, return_alignment=True)
    results = translate_texts(tr, sentences, (call, decoding)) if sentences else []
    best = [t[0] for t in translations(tr, sentences, results, call.source_lang, call.target_lang)]
    return lay.join(best)


def document_lines(stream: BinaryIO, max_bytes: int) -> Iterator[Tuple[int, str]]:
    """(1-based line number, line with its line break) of a --document: a BOM that opens it dropped, invalid UTF-8
    replaced with U+FFFD (a warning names the line). A line over max_bytes bytes stops it (Seq2OnnxError): one
    line never holds more memory than that."""
    for number in itertools.count(1):
        raw = stream.readline(max_bytes + 1)
        if not raw:
            return
        if len(raw) > max_bytes:
            raise Seq2OnnxError(f"line {number}: longer than {max_bytes} bytes; a line (a paragraph) of a --document "
                                f"may hold at most that: break it into lines")
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8):]
        yield number, decode_line(raw, number)


def _run_lines(args: argparse.Namespace, max_bytes: Callable[[Translator, int], Tuple[int, Optional[int]]],
               start: Callable[[Translator, int], Callable[[List[Tuple[int, str]], BinaryIO], None]]) -> int:
    """What `translate` and `score` share: open --input and --output (a bad --output, the input file among
    them, is refused before the model loads), load the model, let start(translator, limit) check what needs it
    and give the handler of the lines, read the lines (cli_io.read_lines, bounded by max_bytes(translator, limit):
    (bytes of a line, None) or, for SOURCE<TAB>TARGET lines, (bytes of a source, bytes of a target)) in chunks of
    --max-batch-size (64 for token batches), let handle(chunk, out) write each chunk's output, flush it, and show
    progress on a terminal."""
    with terminate_raises():                           # SIGTERM, SIGHUP: the temporary output file goes too
        source = stdin_bytes() if args.input is None else open_path("--input", args.input, "rb")
        try:
            with open_output(args.output, source=source,
                             source_name="stdin" if args.input is None else f"--input {args.input}") as out:
                tr, limit = load_translator(args)
                handle = start(tr, limit)
                chunk = args.max_batch_size if args.batch_type == "examples" else 64
                lines = read_lines(source, *max_bytes(tr, limit))
                progress = Progress(source)
                try:
                    for block in iter(lambda: list(itertools.islice(lines, chunk)), []):
                        handle(block, out)
                        out.flush()
                        progress.add(len(block))
                finally:
                    progress.close()
        finally:
            if args.input is not None:
                source.close()
    return 0


def load_translator(args: argparse.Namespace) -> Tuple[Translator, int]:
    """The Translator of MODEL_DIR with the model options, and the source length limit in tokens."""
    from ..translator import Translator
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tr = Translator(args.model_dir, device=args.device, compute_type=args.compute_type,
                            intra_threads=args.intra_threads, inter_threads=args.inter_threads,
                            verify=not args.no_verify)
    except ValueError as e:
        raise Seq2OnnxError(cli_message(e)) from e
    for w in caught:                                   # e.g. an int8 variant exported without its check
        warn(str(w.message))
    try:                                # what the vocabulary cannot spell, or too much work, before any line is read
        tr.prefix_ids(None if getattr(args, "target_prefix", None) is None else [args.target_prefix], 1)
        if getattr(args, "constraints", None):
            beam_size = DecodingOptions.from_kwargs(**with_defaults(flag_decoding(args))).beam_size
            phrases = tr.constraint_ids([args.constraints], 1)
            if phrases is not None:                     # None: no constraints
                check_work("constraints", phrases, beam_size)
    except ValueError as e:
        raise Seq2OnnxError(cli_message(e)) from e
    limit = tr.config.max_positions if args.max_input_length is None else args.max_input_length
    if not 1 <= limit <= tr.config.max_positions:
        raise Seq2OnnxError(f"--max-input-length must be in [1, {tr.config.max_positions}] (the model's "
                            f"max_positions), got {limit}")
    return tr, limit


def _translate_block(tr: Translator, block: List[Tuple[int, str]], records: Records,
                     args: argparse.Namespace, limit: int, terminal: bool,
                     results: Optional[List[TranslationResult]] = None) -> bytes:
    """Blank lines come back from the Translator as one empty hypothesis with score 0. The results are
    appended to `results` when given."""
    out = translate_texts(tr, [t for _, t in block], records)
    if results is not None:
        results.extend(out)
    return b"".join(output_lines(n, text, r, args, limit, terminal) for (n, text), r in zip(block, out))


def translate_texts(tr: Translator, texts: List[str], records: Records) -> List[TranslationResult]:
    """The TranslationResults of `translate`'s options (translation_records') for these texts."""
    call, decoding = records
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")            # truncation: reported by output_lines with line numbers
            return tr.run_batch(texts, call.repeated(len(texts)), decoding)
    except ValueError as e:
        raise Seq2OnnxError(cli_message(e)) from e


def output_lines(n: int, text: str, r: TranslationResult, args: argparse.Namespace, limit: int, terminal: bool = False,
                 warn: Callable[[str], None] = warn) -> bytes:
    """`translate`'s output lines of input line n (`text`, its TranslationResult r), and its warnings ("line n:
    ...", to `warn`)."""
    if r.truncated:
        warn(f"line {n}: longer than {limit} tokens, truncated (--max-input-length)")
    if r.source_unknown_tokens:
        warn(f"line {n}: holds characters the model's tokenizer never saw in training ({r.source_unknown_tokens} "
             "<unk> piece(s)): it lies outside what the model learned, so its translation cannot be trusted")
    if r.constraints_met is not None and not r.constraints_met[0] and text.strip():
        warn(f"line {n}: no translation within the length limit holds every --constraint; this one misses "
             f"the fewest ({len(r.token_ids[0])} tokens, cut at the limit): --max-length-a/--max-length-b/"
             "--max-decoding-length set the limit")
    elif not r.finished[0]:
        warn(f"line {n}: the translation stopped at the length limit before it ended ({len(r.token_ids[0])} "
              "tokens): the model may be looping on this input; --max-length-a/--max-length-b/"
              "--max-decoding-length set the limit")
    assert r.normalized_scores is not None              # translated with return_scores (translate_texts)
    texts = r.hypotheses
    if args.return_alignment:
        assert r.alignment is not None                  # and with return_alignment
        texts = [f"{LINE_BREAKS.sub(' ', t)} ||| {format_alignment(a)}" for t, a in zip(r.hypotheses, r.alignment)]
    return format_output(n, texts, r.normalized_scores, args.num_hypotheses, args.scores, terminal)


# --- score -----------------------------------------------------------------------------------------
SCORE_FORMAT = """\
input: one SOURCE<TAB>TARGET pair per line, UTF-8, from stdin or --input, read as `seq2onnx translate`
reads its lines (invalid UTF-8 replaced, a BOM dropped, a source over --max-input-length tokens cut,
each with a warning naming the line). Only the first 256 x --max-input-length bytes of a SOURCE are
read, and of a TARGET 256 x max_positions bytes (no more can fit; a warning names the line), so a huge
line costs no more memory than a long one and keeps its TAB and its target. A line without exactly
one TAB stops the command (exit 2, naming the line); the lines before it are already written. A
target longer than the model's max_positions is scored on its beginning (a warning names the line).
output: one line per input line, in order, to stdout or --output FILE (written as translate writes):
  default    SCORE                         sum of the target's token log-probs, EOS included,
                                           / tokens ** --length-penalty
  --tokens   SCORE<TAB>TOKENS<TAB>LOGPROBS the target's pieces, EOS last, and the log-prob of each,
                                           space-separated
With the default --length-penalty 1, SCORE is the mean log-prob per token: what `translate --scores`
prints for the same translation. --length-penalty 0 gives the sum (marian-scorer's default).
Uses: reranking n-best lists, filtering a parallel corpus, checking a translation (CTranslate2's
score_batch, fairseq's --score-reference). Exit status as `seq2onnx translate`.
"""


def score_main(argv: List[str]) -> int:
    p = _model_parser("seq2onnx score", "Score given translations with a model package: the log-probability "
                      "of each target given its source.", SCORE_FORMAT, "SOURCE<TAB>TARGET lines", "scores")
    g = p.add_argument_group("scoring")
    g.add_argument("--length-penalty", type=float, default=DecodingOptions.length_penalty,
                   help="SCORE = sum / tokens ** this (default %(default)s: the mean; 0: the sum)")
    g.add_argument("--tokens", action="store_true", help="also print each target piece and its log-prob")
    args = p.parse_args(argv)
    PROG["name"] = "seq2onnx score"
    _check_options(args, length_penalty=args.length_penalty)
    from ..text_input import max_source_chars

    def max_bytes(tr: Translator, limit: int) -> Tuple[int, int]:      # a source; a target of at most max_positions
        return UTF8_MAX_BYTES * max_source_chars(limit), UTF8_MAX_BYTES * max_source_chars(tr.config.max_positions)

    return _run_lines(args, max_bytes, lambda tr, limit: lambda block, out: _score_lines(tr, block, args, out))


def _score_lines(tr: Translator, block: List[Tuple[int, str]], args: argparse.Namespace, out: BinaryIO) -> None:
    """Scores of a chunk of lines, written to `out`; at a line without exactly one TAB, the lines before it
    are written and the command stops naming it."""
    bad = next((i for i, (_, text) in enumerate(block) if text.count("\t") != 1), None)
    if bad != 0:
        out.write(_score_block(tr, block[:bad], args, out.isatty()))
    if bad is not None:
        n, tabs = block[bad][0], block[bad][1].count("\t")
        raise Seq2OnnxError(f"line {n}: {'no TAB' if tabs == 0 else f'{tabs} TABs'}; each line is "
                            "SOURCE<TAB>TARGET (a TAB inside a sentence cannot be scored: replace it with a space)")


def _score_block(tr: Translator, block: List[Tuple[int, str]], args: argparse.Namespace, terminal: bool) -> bytes:
    """Output lines for (line number, SOURCE<TAB>TARGET) lines, each with one TAB."""
    from ..decode.search import normalize
    pairs = [text.split("\t") for _, text in block]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = tr.score_batch([src for src, _ in pairs], [tgt for _, tgt in pairs],
                                     max_batch_size=args.max_batch_size, batch_type=args.batch_type,
                                     max_input_length=args.max_input_length)
    except ValueError as e:
        raise Seq2OnnxError(cli_message(e)) from e
    for w in caught:                                   # "input i ..." / "target i ...": name the line
        warn(re.sub(r"^(input|target) (\d+)", lambda m: f"line {block[int(m.group(2))][0]}: "
                     f"{'source' if m.group(1) == 'input' else 'target'}", cli_message(w.message)))
    data = []
    for r in results:
        fields = [f"{normalize(sum(r.log_probs), len(r.log_probs), args.length_penalty):.6f}"]
        if args.tokens:
            tokens = " ".join(printable(t) if terminal else t for t in r.tokens)
            fields += [tokens, " ".join(f"{lp:.6f}" for lp in r.log_probs)]
        data.append("\t".join(fields) + "\n")
    return "".join(data).encode("utf-8")
