"""Every system at the shapes users run: OPUS-MT-en-de and NLLB-200-distilled-600M.

    python bench/real_shapes.py --shape opus-mt             # bench/results/real-shapes-opus-mt.{json,md}
    python bench/real_shapes.py --shape nllb-600m           # the same for NLLB (its conversion needs far more memory)
    python bench/real_shapes.py --shape opus-mt --quick     # 16 sentences, 1 round: a smoke run (bench/.cache/results/)
    python bench/real_shapes.py --shape nllb-600m --dims tiny --quick   # NLLB's vocabulary and tokenizer on tiny
                                                            # layers: rehearses the NLLB path in minutes
    python bench/real_shapes.py --shape opus-mt --skip-convert          # reuse the converted models; redo failed ones

The folders (random weights, built once under bench/.cache/, seeded, so every build is the same):
  opus-mt    bench/convert.py's build_folder: Helsinki-NLP/opus-mt-en-de's config.json (74.4M parameters, vocabulary
             58,101 in the real vocab.json's layout) and generation_config (beam 4, max_length 512, bad_words [pad],
             forced EOS, renormalize_logits).
  nllb-600m  facebook/nllb-200-distilled-600M's config.json (M2M100 d_model 1024, 12+12 layers, 16 heads, FFN 4096,
             relu, vocab_size 256,206, 615M parameters) and generation_config (greedy, max_length 200): an
             NllbTokenizer whose tokenizer.json has NLLB-200's ids (<s> <pad> </s> <unk>, the pieces, fillers up to
             id 256,000, the 202 language codes from 256,001 (eng_Latn 256,047, deu_Latn 256,042), <mask> 256,203),
             from a small SentencePiece BPE (tests/hf_folders.py's) and tests/hf_folders.py's random M2M100 weights
             (init std scaled to d_model 1024, a length signal and EOS calibrated so greedy outputs end after 4-30
             tokens). Decoded eng_Latn -> deu_Latn: every system is given deu_Latn as its forced first token.
Both generation_configs keep the hub's max_length: the random weights' outputs end well before it, so it bounds
the rare row that does not end (the tables count the rows that reach it).

Conversions, each a process of its own, timed from its start (imports included) with its peak RSS (VmHWM):
`seq2onnx convert FOLDER PACKAGE --int8 --skip-int8-validation` (bench/convert.py's run_once: the seq2onnx it runs
is whatever the venv imports; the int8 variant's gate is skipped on random weights, its figures are still in the
manifest), CTranslate2's `ct2-transformers-converter` (float32 weights; int8 = compute_type at load), and Optimum's
exporter + ORTQuantizer (bench/optimum_worker.py, in its overlay; left out with its error where it fails).

Decoding: gettext English msgids (tests/hf_folders.py's), tokenized by the folder's own tokenizer, every system at
the model's generation settings (bench/hf_marian_convert.py's engines: ours fp32 and int8, HF transformers fp32,
CTranslate2 float32 and int8, Optimum fp32 and int8), 2 threads each, interleaved rounds after a warm-up
(bench/measure.py's rule). Cases: batch 1 greedy (on the first --batch1-sentences), batch 16 greedy, batch B beam 4
(B = --beam-batch, 16 by default). Fidelity: rows token-identical to transformers' generate (fp32 rows should all be;
int8 rows are not expected to be on random weights). Peak RSS: each system and precision in a process of its own that
loads it and runs each case once (bench/memory.py's rule).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import runpy
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BENCH = ROOT / "bench"
CACHE = BENCH / ".cache"
RESULTS = BENCH / "results"
THREADS = 2
SEED = 5

# facebook/nllb-200-distilled-600M's config.json and generation_config.json
NLLB_600M = dict(d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                 decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, activation_function="relu",
                 max_position_embeddings=1024, scale_embedding=True, dropout=0.1, attention_dropout=0.1,
                 activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0)
NLLB_VOCAB = 256206
NLLB_FIRST_CODE = 256001          # ace_Arab; the codes follow in FAIRSEQ_LANGUAGE_CODES order, then <mask>
NLLB_GENERATION = dict(max_length=200)
NLLB_SOURCE, NLLB_TARGET = "eng_Latn", "deu_Latn"
CALIBRATION_LENGTH = 49           # generate()'s max_length while EOS is calibrated (bench/convert.py's)
FILLER = "<filler_{}>"            # stand-ins for the real SentencePiece's pieces the small one lacks

SYSTEMS = ("ours", "hf", "ct2", "optimum")
CONVERTERS = {"ours": "seq2onnx convert --int8", "ct2": "ct2-transformers-converter",
              "optimum": "Optimum export + ORTQuantizer"}
VARIANTS = {"ours": ("fp32", "int8"), "hf": ("fp32",), "ct2": ("float32", "int8"), "optimum": ("fp32", "int8")}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- the NLLB-200-distilled-600M-shaped folder ----------------------------------------------------------------------
def nllb_layout(tokenizer_json: Dict[str, Any], codes: Sequence[str], first_code: int = NLLB_FIRST_CODE,
                mask: str = "<mask>") -> Dict[str, Any]:
    """A small NllbTokenizer's tokenizer.json (its model's pieces, then <mask> and the language codes as added tokens)
    -> the same tokenizer with NLLB-200's ids: FILLER pieces after its own up to first_code - 1, the codes from
    first_code in `codes` order, then mask; the post-processor's ids follow. ValueError if the tokenizer has more
    pieces than fit, or added tokens past its pieces other than the codes and mask."""
    data = copy.deepcopy(tokenizer_json)
    vocab = data["model"]["vocab"]
    pieces = len(vocab)
    if pieces > first_code:
        raise ValueError(f"the tokenizer has {pieces} pieces: more than the {first_code} before the language codes")
    vocab.update({FILLER.format(i): i for i in range(pieces, first_code)})
    moved = {code: first_code + k for k, code in enumerate(codes)}
    moved[mask] = first_code + len(codes)
    for token in data["added_tokens"]:
        if token["content"] in moved:
            token["id"] = moved[token["content"]]
        elif token["id"] >= pieces:
            raise ValueError(f"added token {token['content']!r} (id {token['id']}) is neither a language code nor "
                             f"{mask}")
    data["added_tokens"].sort(key=lambda t: t["id"])
    for special in ((data.get("post_processor") or {}).get("special_tokens") or {}).values():
        special["ids"] = [moved[t] if t in moved else vocab[t] for t in special["tokens"]]
    return data


def build_nllb(folder: Path, dims: Dict[str, Any]) -> Path:
    """The NLLB-200-distilled-600M-shaped folder (module doc; dims: the layers' sizes) at `folder`, unless there."""
    if (folder / "model.safetensors").is_file():
        return folder
    from bench.base_model import atomic_folder

    def write(tmp: Path) -> None:
        from transformers import AutoTokenizer, GenerationConfig, M2M100Config, NllbTokenizer
        from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

        from tests import hf_folders as H

        H._fairseq_spm(tmp)
        codes = list(FAIRSEQ_LANGUAGE_CODES)
        NllbTokenizer.from_pretrained(str(tmp), src_lang=NLLB_SOURCE, extra_special_tokens=codes).save_pretrained(
            str(tmp))
        path = tmp / "tokenizer.json"
        path.write_text(json.dumps(nllb_layout(json.loads(path.read_text(encoding="utf-8")), codes),
                                   ensure_ascii=False), encoding="utf-8")
        tok = AutoTokenizer.from_pretrained(str(tmp))
        got = {c: tok.convert_tokens_to_ids(c) for c in (NLLB_SOURCE, NLLB_TARGET, "<mask>")}
        if got != {NLLB_SOURCE: 256047, NLLB_TARGET: 256042, "<mask>": 256203}:
            raise RuntimeError(f"the relaid tokenizer's ids are not NLLB-200's: {got}")
        ids = {t: tok.convert_tokens_to_ids(t) for t in ("<s>", "<pad>", "</s>")}
        # tests/hf_folders.py's init std (0.4 at d_model 64) at the same scale of a row's norm (bench/convert.py's rule)
        std = H.FAIRSEQ_LENGTH["init_std"] * (64 / dims["d_model"]) ** 0.5
        config = M2M100Config(vocab_size=NLLB_VOCAB, **dims, init_std=std, pad_token_id=ids["<pad>"],
                              bos_token_id=ids["<s>"], eos_token_id=ids["</s>"], decoder_start_token_id=ids["</s>"],
                              tokenizer_class="NllbTokenizer")
        generation = dict(bos_token_id=ids["<s>"], eos_token_id=ids["</s>"], pad_token_id=ids["<pad>"],
                          decoder_start_token_id=ids["</s>"])
        H._seeded(SEED)
        model = H._fairseq_model(config).eval()
        model.generation_config = GenerationConfig(max_length=CALIBRATION_LENGTH, **generation)
        H._shift_fairseq_eos(model)(H.calibrate_eos(model, tmp))
        model.generation_config = GenerationConfig(**NLLB_GENERATION, **generation)
        model.save_pretrained(str(tmp), safe_serialization=True)
        model.generation_config.save_pretrained(str(tmp))

    start = time.perf_counter()
    atomic_folder(folder, write)
    log(f"folder: {folder} built ({time.perf_counter() - start:.0f}s)")
    return folder


def build(shape: str, dims: str) -> Path:
    if shape == "opus-mt":
        from bench.convert import FOLDER_NAME, WORK, build_folder
        return build_folder(WORK / FOLDER_NAME)
    from tests.hf_folders import TINY
    return build_nllb(CACHE / "real_shapes" / f"nllb-200-distilled-600M-shaped{'-tiny' if dims == 'tiny' else ''}",
                      dict(NLLB_600M, **TINY) if dims == "tiny" else NLLB_600M)


# --- conversions -----------------------------------------------------------------------------------------------------
def measured_child(argv: List[str]) -> int:
    """`--measure-module MOD ARGS` / `--measure-script PATH ARGS`: run it as __main__ in this process, then print this
    process's peak RSS as the last line on stderr (a child's own VmHWM: bench/memory.py)."""
    kind, target, *args = argv
    sys.argv = [target, *args]
    code = 0
    try:
        if kind == "--measure-module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    from bench.memory import own_peak_rss_mib
    print(json.dumps({"peak_rss_mib": own_peak_rss_mib()}), file=sys.stderr, flush=True)
    return code


def measure_conversion(argv: List[str], env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """A converter run in a process of its own (measured_child) -> {"seconds", "peak_rss_mib", "ok", "error"}."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    lines = proc.stderr.splitlines()
    peak = next((json.loads(line)["peak_rss_mib"] for line in reversed(lines) if line.startswith('{"peak_rss_mib"')),
                None)
    ok = proc.returncode == 0
    return {"seconds": round(seconds, 1), "peak_rss_mib": peak, "ok": ok,
            "error": None if ok else "\n".join(lines[-6:])}


def convert_all(folder: Path, work: Path, systems: Sequence[str]) -> Dict[str, Dict[str, Any]]:
    """Each converter on the folder (module doc) -> its figures; the files land in work/{package,ct2,optimum}."""
    from bench.convert import run_once
    out: Dict[str, Dict[str, Any]] = {}
    if "ours" in systems:
        log("convert: seq2onnx convert --int8")
        try:
            run = run_once(folder, work / "package", "int8", None)
            manifest = json.loads((work / "package" / "manifest.json").read_text())
            out[CONVERTERS["ours"]] = {"seconds": round(run["seconds"], 1), "peak_rss_mib": run["peak_rss_mib"],
                                             "ok": True, "error": None,
                                             "steps": {s["step"]: round(s["seconds"], 1) for s in run["steps"]},
                                             "variants": {k: v.get("status") for k, v in
                                                          manifest.get("variants", {}).items()
                                                          if isinstance(v, dict)}}
        except RuntimeError as e:
            out[CONVERTERS["ours"]] = {"ok": False, "error": str(e)}
    if "ct2" in systems:
        log("convert: ct2-transformers-converter")
        out[CONVERTERS["ct2"]] = measure_conversion(
            ["--measure-module", "ctranslate2.converters.transformers", "--model", str(folder),
             "--output_dir", str(work / "ct2"), "--force"])
    if "optimum" in systems:
        from bench.engines import ensure_optimum_overlay, optimum_env
        log("convert: Optimum export + ORTQuantizer")
        overlay = ensure_optimum_overlay(CACHE / "optimum-site")
        out[CONVERTERS["optimum"]] = measure_conversion(
            ["--measure-script", str(BENCH / "optimum_worker.py"), "export", str(folder), str(work / "optimum")],
            optimum_env(overlay))
    for name, figures in out.items():
        log(f"  {name}: " + (f"{figures['seconds']}s, peak {figures['peak_rss_mib']} MiB" if figures["ok"]
                             else f"failed: {figures['error']}"))
    return out


# --- the engines -----------------------------------------------------------------------------------------------------
def strip_first(rows: List[List[int]], token: Optional[int]) -> List[List[int]]:
    """The rows without their first token where it is `token` (the forced target language), as given otherwise."""
    if token is None:
        return rows
    return [row[1:] if row[:1] == [token] else row for row in rows]


def model_facts(folder: Path, shape: str) -> Dict[str, Any]:
    """What the engines need from the folder: eos, max_length, the forced first target token (NLLB: deu_Latn)."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(folder))
    generation = json.loads((folder / "generation_config.json").read_text())
    target = NLLB_TARGET if shape == "nllb-600m" else None
    return {"eos": generation["eos_token_id"], "max_length": generation["max_length"], "generation": generation,
            "target_token": target, "forced_bos": None if target is None else tok.convert_tokens_to_ids(target)}


def ct2_vocabulary(ct2_dir: Path) -> Dict[str, int]:
    """token -> id of the CTranslate2 model (its target vocabulary: the tokenizer's, padded to vocab_size)."""
    for name in ("target_vocabulary.json", "shared_vocabulary.json"):
        if (ct2_dir / name).exists():
            return {t: i for i, t in enumerate(json.loads((ct2_dir / name).read_text(encoding="utf-8")))}
    raise FileNotFoundError(f"{ct2_dir} has no target_vocabulary.json or shared_vocabulary.json")


def make_engine(system: str, variant: str, work: Path, folder: Path, facts: Dict[str, Any], worker=None):
    from bench import hf_marian_convert as M
    if system == "ours":
        return M.OursSpeed(work / "package", variant, facts["forced_bos"])
    if system == "hf":
        return M.TransformersSpeed(folder, facts["forced_bos"])
    if system == "ct2":
        return M.CT2Speed(work / "ct2", variant, ct2_vocabulary(work / "ct2"), facts["eos"], facts["max_length"],
                          facts["target_token"])
    if system == "optimum":
        return M.OptimumSpeed(worker, variant, facts["eos"], facts["forced_bos"])
    raise ValueError(system)


def optimum_worker(work: Path, variants: Sequence[str]):
    from bench.engines import OptimumWorker, ensure_optimum_overlay
    return OptimumWorker(ensure_optimum_overlay(CACHE / "optimum-site"), work / "optimum", THREADS, variants)


def cases(st: argparse.Namespace, sources: List[List[int]]) -> List[Dict[str, Any]]:
    """(name, batch, beam, the batches of source ids) of each case."""
    out = []
    for name, batch, beam, n in (("batch 1 greedy", 1, 1, st.batch1_sentences), ("batch 16 greedy", 16, 1, None),
                                 (f"batch {st.beam_batch} beam 4", st.beam_batch, 4, None)):
        rows = sources[:n] if n else sources
        out.append({"case": name, "batch": batch, "beam": beam,
                    "batches": [rows[i:i + batch] for i in range(0, len(rows), batch)]})
    return out


def memory_child(spec_text: str) -> int:
    """`--memory-child SPEC`: one engine alone, each case once -> {"system", "peak_rss_mib"} on stdout."""
    spec = json.loads(spec_text)
    answers, sys.stdout = sys.stdout, sys.stderr
    work, folder = Path(spec["work"]), Path(spec["folder"])
    worker = optimum_worker(work, [spec["variant"]]) if spec["system"] == "optimum" else None
    engine = make_engine(spec["system"], spec["variant"], work, folder, spec["facts"], worker)
    try:
        for case in spec["cases"]:
            engine.run(case["batches"], case["beam"])
        from bench.memory import own_peak_rss_mib
        peak = worker.peak_rss_mib() if worker else own_peak_rss_mib()
    finally:
        engine.close()
        if worker is not None:
            worker.close()
    print(json.dumps({"system": engine.name, "peak_rss_mib": peak}), file=answers, flush=True)
    return 0


def peak_rss(system: str, variant: str, work: Path, folder: Path, facts, case_list) -> Dict[str, Any]:
    spec = {"system": system, "variant": variant, "work": str(work), "folder": str(folder), "facts": facts,
            "cases": [{"batches": c["batches"], "beam": c["beam"]} for c in case_list]}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--memory-child", json.dumps(spec)],
                          stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the memory child of {system} {variant} failed ({proc.returncode}); its error is above")
    return json.loads(proc.stdout.splitlines()[-1])


# --- the run ---------------------------------------------------------------------------------------------------------
def time_cases(engines, case_list, rounds: int, facts) -> List[Dict[str, Any]]:
    """Each case: one warm-up, then `rounds` interleaved rounds of every engine (bench/measure.py's rule)."""
    from bench.measure import PAUSE_S
    reference = "HF transformers (torch)"
    out = []
    for case in case_list:
        seconds: Dict[str, List[float]] = {e.name: [] for e in engines}
        outputs: Dict[str, List[List[int]]] = {}
        for r in range(rounds + 1):
            for e in engines:
                time.sleep(PAUSE_S)
                rows, s = e.run(case["batches"], case["beam"])
                outputs[e.name] = strip_first(rows, facts["forced_bos"])
                if r > 0:
                    seconds[e.name].append(s)
            log(f"  {case['case']}: round {r}/{rounds} done" + (" (warm-up)" if r == 0 else ""))
        n = sum(len(b) for b in case["batches"])
        limit = facts["max_length"] - 1 - (facts["forced_bos"] is not None)   # generated tokens before EOS, at most
        rows_out = []
        for e in engines:
            median = statistics.median(seconds[e.name])
            row = {"system": e.name, "precision": e.precision, "seconds": [round(s, 4) for s in seconds[e.name]],
                   "sentences_per_s": round(n / median, 2),
                   "target_tokens_per_s": round(sum(len(t) + 1 for t in outputs[e.name]) / median, 1),
                   "rows": n, "rows_at_max_length": sum(len(t) >= limit for t in outputs[e.name])}
            if reference in outputs:
                row["rows_equal_transformers"] = sum(a == b for a, b in zip(outputs[e.name], outputs[reference]))
            for ours in ("seq2onnx fp32", "seq2onnx int8"):          # the system's seconds / ours, per round
                if ours in seconds:
                    row[f"{ours} speedup"] = round(statistics.median(
                        s / o for s, o in zip(seconds[e.name], seconds[ours])), 3)
            rows_out.append(row)
        out.append({"case": case["case"], "batch": case["batch"], "beam": case["beam"], "rows": rows_out})
    return out


def failure(error: str) -> str:
    """The line of a converter's last lines that says why it failed (not the peak RSS line measured_child adds)."""
    lines = [line.strip() for line in error.splitlines() if line.strip() and not line.startswith('{"peak_rss_mib"')]
    return next((line for line in reversed(lines) if "rror" in line), lines[-1] if lines else error)


def markdown(data: Dict[str, Any]) -> str:
    from bench.report import machine_text
    lines = [f"# Every system at the {data['shape_name']} shape", ""]
    if data.get("note"):
        lines += [f"**{data['note']}**", ""]
    lines += [f"{data['shape_doc']} Random weights (bench/real_shapes.py's docstring). {data['sentences']} gettext "
              f"sentences ({data['batch1_sentences']} at batch 1), each system at the model's generation settings "
              f"({json.dumps(data['generation_settings'])}), {data['threads']} threads every system, {data['rounds']} "
              f"interleaved round(s) after a warm-up. Speedup: the median over rounds of the system's seconds / ours "
              f"(> 1: ours is faster). Rows equal: best hypothesis token-identical to transformers' generate.", "",
              "## Conversion: seconds (from the process's start) and peak RSS", "",
              "| converter | seconds | peak RSS (MiB) |", "|---|---:|---:|"]
    for name, c in data["conversions"].items():
        lines.append(f"| {name} | {c['seconds'] if c.get('ok') else 'failed'} | "
                     f"{c.get('peak_rss_mib') if c.get('ok') else '-'} |")
    lines += [f"\n{name} failed: `{failure(c['error'])}`" for name, c in data["conversions"].items() if not c.get("ok")]
    for case in data["cases"]:
        lines += ["", f"## {case['case']}", "",
                  "| system | sentences/s | target tokens/s | seq2onnx fp32 speedup | seq2onnx int8 speedup | "
                  "rows equal | rows at max_length |", "|---|---:|---:|---:|---:|---:|---:|"]
        for r in case["rows"]:
            sp = [f"{r[k]:.2f}x" if k in r else "-" for k in ("seq2onnx fp32 speedup", "seq2onnx int8 speedup")]
            eq = f"{r['rows_equal_transformers']}/{r['rows']}" if "rows_equal_transformers" in r else "-"
            lines.append(f"| {r['system']} | {r['sentences_per_s']:.2f} | {r['target_tokens_per_s']:.0f} | {sp[0]} | "
                         f"{sp[1]} | {eq} | {r['rows_at_max_length']} |")
    if data["peak_rss_mib"]:
        lines += ["", "## Peak RSS (MiB): each system alone in a process that loads it and runs each case once", "",
                  "| system | peak RSS |", "|---|---:|"]
        lines += [f"| {name} | {mib:.0f} |" for name, mib in data["peak_rss_mib"].items()]
    lines += ["", "Machine: " + machine_text(data["machine"], f"load average {data['load_avg_before'][0]:.2f} before, "
                                            f"{data['load_avg_after'][0]:.2f} after; run took "
                                            f"{data['elapsed_s'] / 60:.1f} min")]
    return "\n".join(lines)


SHAPE_DOC = {
    "opus-mt": ("OPUS-MT-en-de (Helsinki-NLP/opus-mt-en-de)", "MarianMTModel, 74.4M parameters, d_model 512, 6+6 "
                "layers, vocabulary 58,101; en -> de."),
    "nllb-600m": ("NLLB-200-distilled-600M (facebook/nllb-200-distilled-600M)", "M2M100, 615M parameters, d_model "
                  "1024, 12+12 layers, vocabulary 256,206; eng_Latn -> deu_Latn (forced first token)."),
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--measure-module"], ["--measure-script"]):
        return measured_child(argv)
    if argv[:1] == ["--memory-child"]:
        return memory_child(argv[1])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=tuple(SHAPE_DOC), required=True)
    ap.add_argument("--dims", choices=("hub", "tiny"), default="hub",
                    help="nllb-600m: tiny = tests/hf_folders.py's layer sizes with NLLB's vocabulary and tokenizer, "
                         "to rehearse the path (results under --work, never bench/results)")
    ap.add_argument("--quick", action="store_true", help="16 sentences, 1 round: a smoke run")
    ap.add_argument("--skip-convert", action="store_true",
                    help="reuse the models converted before (bench/.cache/real_shapes/SHAPE/); redo only what "
                         "failed")
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    ap.add_argument("--sentences", type=int, help="sentences each case decodes (default 128, quick 16)")
    ap.add_argument("--batch1-sentences", type=int, help="of them, at batch 1 (default 32, quick 8)")
    ap.add_argument("--beam-batch", type=int, default=16, help="the beam-4 case's batch (default 16; 4 if time "
                                                               "demands at NLLB's size)")
    ap.add_argument("--rounds", type=int, help="counted rounds per case (default 3, quick 1)")
    ap.add_argument("--no-memory", action="store_true", help="skip each system's peak RSS")
    ap.add_argument("--note", default="", help="a line the results lead with (e.g. 'busy machine, smoke run')")
    ap.add_argument("--out", type=Path, help="results folder (default bench/results; quick or tiny: WORK/results)")
    a = ap.parse_args(argv)
    if a.dims == "tiny" and a.shape != "nllb-600m":
        ap.error("--dims tiny is for --shape nllb-600m (opus-mt is small enough to run as it is)")
    a.sentences = a.sentences or (16 if a.quick else 128)
    a.batch1_sentences = min(a.sentences, a.batch1_sentences or (8 if a.quick else 32))
    a.rounds = a.rounds or (1 if a.quick else 3)
    stem = f"real-shapes-{a.shape}" + ("-tiny" if a.dims == "tiny" else "") + ("-quick" if a.quick else "")
    work = CACHE / "real_shapes" / (a.shape + ("-tiny" if a.dims == "tiny" else ""))
    out_dir = a.out or (work / "results" if a.quick or a.dims == "tiny" else RESULTS)
    work.mkdir(parents=True, exist_ok=True)

    started, load_before = time.time(), os.getloadavg()
    folder = build(a.shape, a.dims)
    done = work / "conversions.json"
    conversions = json.loads(done.read_text()) if a.skip_convert and done.exists() else {}
    redo = [s for s in a.systems if s != "hf" and not conversions.get(CONVERTERS[s], {}).get("ok")]
    if conversions:
        log(f"convert: reusing {work}'s {', '.join(k for k, v in conversions.items() if v.get('ok'))} (figures of "
            f"that conversion)")
    conversions.update(convert_all(folder, work, redo))
    done.write_text(json.dumps(conversions, indent=1))
    systems = [s for s in a.systems if s == "hf" or conversions.get(CONVERTERS[s], {}).get("ok")]
    for s in set(a.systems) - set(systems):
        log(f"{s}: left out, its conversion failed")

    from transformers import AutoTokenizer

    from tests.hf_folders import gettext_pairs
    facts = model_facts(folder, a.shape)
    lines = [s for s, _ in gettext_pairs("de")]
    lines = lines[1::max(1, len(lines) // a.sentences)][:a.sentences]      # spread over the catalogs
    sources = AutoTokenizer.from_pretrained(str(folder))(lines)["input_ids"]
    case_list = cases(a, sources)

    import torch
    torch.set_num_threads(THREADS)
    worker = optimum_worker(work, VARIANTS["optimum"]) if "optimum" in systems else None
    engines = []
    try:
        engines = [make_engine(s, v, work, folder, facts, worker) for s in systems for v in VARIANTS[s]]
        results = time_cases(engines, case_list, a.rounds, facts)
    finally:
        for e in engines:
            e.close()
        if worker is not None:
            worker.close()
    memory: Dict[str, float] = {}
    if not a.no_memory:
        for s in systems:
            for v in VARIANTS[s]:
                got = peak_rss(s, v, work, folder, facts, case_list)
                memory[got["system"]] = got["peak_rss_mib"]
                log(f"  memory: {got['system']} {got['peak_rss_mib']:.0f} MiB")

    from bench import report
    load_after = os.getloadavg()
    note = a.note
    cpus = len(os.sched_getaffinity(0))
    if not note and max(load_before[0], load_after[0]) > cpus / 2:
        note = f"busy machine (load average above {cpus / 2:g} on {cpus} CPUs): compare the rows of this run, not runs"
    if a.quick and "smoke" not in note:
        note = "; ".join(filter(None, [note, "smoke run (--quick): not results"]))
    name, doc = SHAPE_DOC[a.shape]
    data_dims = json.loads((folder / "config.json").read_text())
    if a.dims == "tiny":
        name = name + ", tiny layers"
        doc = (f"M2M100 with tests/hf_folders.py's tiny layers (d_model {data_dims['d_model']}, "
               f"{data_dims['encoder_layers']}+{data_dims['decoder_layers']} layers), NLLB's vocabulary (256,206) and "
               f"tokenizer; eng_Latn -> deu_Latn (forced first token).")
    data = {"shape": a.shape, "dims": a.dims, "shape_name": name, "shape_doc": doc, "note": note,
            "folder": str(folder.relative_to(ROOT)), "config": json.loads((folder / "config.json").read_text()),
            "generation_settings": facts["generation"], "sentences": len(sources),
            "batch1_sentences": a.batch1_sentences, "rounds": a.rounds, "threads": THREADS,
            "conversions": conversions, "cases": results, "peak_rss_mib": memory,
            "machine": report.machine(CACHE / "optimum-site" if "optimum" in systems else None),
            "load_avg_before": load_before, "load_avg_after": load_after, "elapsed_s": round(time.time() - started)}
    md = markdown(data)
    report.write(out_dir, stem, data, md)
    print(md)
    log(f"wrote {out_dir / (stem + '.json')} and {out_dir / (stem + '.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
