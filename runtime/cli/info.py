"""`seq2onnx info`: what a model package is (architecture, vocabulary, variants and how each was checked at
export, exporter), as text or --json. Everything shown comes from the model folder, an untrusted input: a
string's control characters are shown as \\xNN and a figure that is not a number is shown as "?"."""
from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Optional

from ..errors import printable
from .main import OneLineParser
from .cli_io import stdout_text


def package_info(model_dir: str, verify: bool = True) -> Dict[str, Any]:
    """What a package is: architecture, vocabulary, variants with sizes, parity and its thresholds, exporter."""
    from ..package.manifest import read_package, version_text
    pkg = read_package(model_dir, verify=verify)
    if verify:
        for name in pkg.variants:
            pkg.verify_variant(name)
    m, cfg = pkg.manifest, pkg.config
    tok = pkg.tokenizer
    specials = {role: {"token": tok.id_to_token(getattr(cfg, f"{role}_id")), "id": getattr(cfg, f"{role}_id")}
                for role in ("pad", "bos", "eos", "unk")}
    variants = {}
    for name, v in pkg.variants.items():
        sizes = {"encoder": pkg.file_bytes(v.encoder.name), "decoder_step": pkg.file_bytes(v.decoder_step.name)}
        thresholds = m["variants"][name].get("thresholds")
        variants[name] = {"precision": v.precision, "status": v.status, "encoder": v.encoder.name,
                          "decoder_step": v.decoder_step.name, "bytes": sizes, "parity": v.parity,
                          "thresholds": thresholds if isinstance(thresholds, dict) else None}
        if v.few_rows is not None:
            few = v.few_rows.decoder_step.name
            variants[name]["few_rows"] = {"decoder_step": few, "bytes": pkg.file_bytes(few),
                                          "max_rows": v.few_rows.max_rows,
                                          "min_onnxruntime": version_text(v.few_rows.min_onnxruntime)}
        if v.external_data:           # the data files its graphs read their weights from (a shared one once)
            variants[name]["data_files"] = {d: pkg.file_bytes(d) for d in sorted(set(v.external_data.values()))}
    return {
        "path": str(pkg.root), "format": m["format"], "format_version": m["format_version"],
        "seq2onnx_version": m.get("seq2onnx_version"), "created": m.get("created"),
        "architecture": {**cfg.to_dict(), "head_dim": cfg.head_dim},
        "vocab_size": cfg.vocab_size, "special_tokens": specials, "variants": variants,
        "opset": m.get("opset"), "ir_version": m.get("ir_version"), "exporter": m.get("exporter", {}),
        "source_checkpoint": m.get("source_checkpoint", {}),
        "total_bytes": sum(int(f["bytes"]) for f in m["files"].values()), "verified": verify,
        "cross_per_sentence": pkg.cross_per_sentence,
        "languages": None if pkg.languages is None else pkg.languages.to_manifest(),
        "generation": pkg.generation, "source_model": m.get("source_model"),
    }


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def _number(value: Any) -> Optional[float]:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _share(value: Any) -> str:
    x = _number(value)
    return "?" if x is None else f"{100 * x:.1f}%"


def _diff(value: Any) -> str:
    x = _number(value)
    return "?" if x is None else f"{x:.2g}"


# The figures of export/parity.py's ParityReport (docs/CONTRACTS.md, "Model package"), as `info` words them.
# A gate (the variant's `thresholds`) is a least share; int8 and fp16 are gated on top-1 and greedy tokens only.
FIGURES = {"top1_agreement": "of decoder steps pick the same best token (top-1 agreement)",
           "greedy_token_match": "of greedy-search token positions identical",
           "beam4_token_match": "of beam-4 hypotheses identical, rank for rank"}
BEAM4 = ("beam-4 compares each sentence's 4 hypotheses with the reference's, rank for rank: one counts only if its "
         "tokens are the same at the same rank. Hypotheses below the best often have close scores, which reduced "
         "precision can reorder or replace, and a beam that takes another token explores other continuations: so "
         "this share lies below the greedy one. It is recorded, not gated; the gate is top-1 agreement and greedy "
         "tokens")


def parity_lines(v: Dict[str, Any]) -> List[str]:
    """How a variant was checked at export, from its manifest entry: what was compared, on how many sentences,
    each figure beside the least the variant had to reach and whether it did."""
    p, gates = v.get("parity"), v.get("thresholds") or {}
    if not isinstance(p, dict) or not p:
        return []
    n, real = _number(p.get("sentences")), _number(p.get("real_sentences"))
    sentences = f"{'?' if n is None else f'{n:.0f}'} sentences"
    if n is not None and real is not None:
        sentences += f" ({real:.0f} from --parity-data, {n - real:.0f} synthetic)"
    against = "PyTorch fp32" if v.get("precision") != "float32" else "PyTorch"
    lines = [f"parity at export: the ONNX graphs against the {against} checkpoint on {sentences}, "
             f"{p.get('provider', '?')}:"]
    applied = v.get("status") == "checked"
    for key, words in FIGURES.items():
        line = f"  {_share(p.get(key)):>6} {words}"
        least = _number(gates.get(key)) if isinstance(gates, dict) else None
        if least is not None:
            figure = _number(p.get(key))
            met = figure is not None and figure >= least
            line += (f"; gate >= {100 * least:g}%: {'passed' if met else 'not reached'}" if applied else
                     f"; gate >= {100 * least:g}% not applied ({v.get('status')})")
        elif v.get("precision") == "float32" and applied:
            line += "; gate: identical" if key != "top1_agreement" else ""
        elif key == "beam4_token_match":
            line += "; recorded, not gated (note below)"
        lines.append(line)
    gated = ("gate: within the export's fp32 tolerance" if v.get("precision") == "float32" and applied
             else "not gated" if v.get("precision") != "float32" else "")
    lines.append(f"  largest difference (absolute, relative above 1): encoder {_diff(p.get('encoder_max_abs_diff'))}, "
                 f"log-probs {_diff(p.get('decoder_max_abs_diff'))}, caches {_diff(p.get('cache_max_abs_diff'))}"
                 + (f"; {gated}" if gated else ""))
    return lines


def _figure(value: Any, form: str) -> str:
    x = _number(value)
    return "?" if x is None else format(x, form)


def training_lines(src: Dict[str, Any]) -> List[str]:
    """The checkpoint a package came from and its training summary (its train_meta, written by seq2onnx train:
    the step, the best --best-metric, the scores of the validation it was saved at), and the trainer's verdict
    when it called it undertrained (source_checkpoint.undertrained, recorded by export)."""
    if not src:
        return []
    meta = src.get("train_meta")
    if not isinstance(meta, dict):
        meta = {}
    about = [f"step {_figure(meta.get('step'), '.0f')}"] if "step" in meta else []
    if "epoch" in meta:
        about.append(f"epoch {_figure(meta.get('epoch'), '.0f')}")
    if isinstance(meta.get("averaged_from"), list):
        about.append(f"averaged from {len(meta['averaged_from'])} checkpoints")
    lines = [f"checkpoint     {src.get('file')}" + (f" ({', '.join(about)})" if about else "")]
    best, metrics = meta.get("best"), meta.get("metrics")
    scores = []
    if isinstance(best, dict) and best.get("value") is not None:
        scores.append(f"best {best.get('metric')} {_figure(best.get('value'), '.4g')} "
                      f"at step {_figure(best.get('step'), '.0f')}")
    if isinstance(metrics, dict) and metrics:
        last = [f"loss {_figure(metrics.get('loss'), '.3f')}"]
        if _number(metrics.get("n_decoded")):
            last += [f"chrF {_figure(metrics.get('chrf'), '.1f')}", f"BLEU {_figure(metrics.get('bleu'), '.1f')}",
                     f"exact match {_share(metrics.get('exact_match'))} of {_figure(metrics.get('n_decoded'), '.0f')} "
                     "sentences"]
        averaged = " (before averaging)" if "averaged_from" in meta else ""
        scores.append(f"validation at step {_figure(meta.get('step'), '.0f')}{averaged}: " + ", ".join(last))
    if scores:
        lines.append("training       " + "; ".join(scores))
    if src.get("undertrained"):
        lines.append("               undertrained (the trainer's verdict), its translations will be poor:")
        lines += [f"                 - {reason}" for reason in src["undertrained"]]
    return lines


def _print_info(info: Dict[str, Any]) -> None:
    """The text of `seq2onnx info`: its strings come from the model folder, so control characters are
    shown as \\xNN."""
    out = stdout_text()

    def say(line: str) -> None:
        print(printable(line), file=out)

    a = info["architecture"]
    norm = "pre-norm" if a["norm_first"] else "post-norm (paper)"
    say(f"model package  {info['path']}")
    say(f"format         {info['format']} v{info['format_version']}, seq2onnx {info['seq2onnx_version']}, "
        f"created {info['created']}")
    say(f"architecture   Transformer {norm}: {a['encoder_layers']}+{a['decoder_layers']} layers, "
        f"d_model {a['d_model']}, {a['n_heads']} heads x {a['head_dim']}, d_ff {a['d_ff']}, "
        f"max_positions {a['max_positions']}, shared embeddings {a['share_embeddings']}, "
        f"tied output {a['tie_output_embedding']}")
    specials = ", ".join(f"{r} {s['token']}={s['id']}" for r, s in info["special_tokens"].items())
    say(f"vocabulary     {info['vocab_size']} tokens ({specials})")
    say("decoder step   " + ("cross K/V once per sentence (shared by its beams)" if info["cross_per_sentence"]
                             else "cross K/V copied per row (graph contract before cross_per_sentence)"))
    say("variants")
    beam4_below_greedy = False
    for name, v in info["variants"].items():
        b = v["bytes"]
        say(f"  {name:<5} {v['precision']:<8} {v['encoder']} {_size(b['encoder'])} + "
            f"{v['decoder_step']} {_size(b['decoder_step'])}; {v['status']}")
        if v.get("data_files"):
            say("        external weights: " + ", ".join(f"{d} {_size(n)}" for d, n in v["data_files"].items()))
        for line in parity_lines(v):
            say(f"        {line}")
        p = v["parity"] if isinstance(v["parity"], dict) else {}
        beam4, greedy = _number(p.get("beam4_token_match")), _number(p.get("greedy_token_match"))
        beam4_below_greedy |= beam4 is not None and greedy is not None and beam4 < greedy
        if "few_rows" in v:
            f = v["few_rows"]
            say(f"        steps of at most {f['max_rows']} rows: {f['decoder_step']} {_size(f['bytes'])} "
                f"(onnxruntime >= {f['min_onnxruntime']}; the variant's gates hold for it too)")
    if beam4_below_greedy:
        say(f"  note: {BEAM4}")
    langs = info["languages"]
    if langs:
        how = {"source_prefix": "a target tag before the source", "forced_bos": "a forced first target token",
               None: ""}[langs["target_token"]]
        say(f"languages      from {', '.join(langs['source']) or '?'} into {', '.join(langs['target']) or '?'}"
            + (f" (--source-lang/--target-lang; {how})" if how or langs["source_token"] else ""))
    if info["generation"]:
        say("defaults       " + ", ".join(f"{k}={v}" for k, v in info["generation"].items()))
    src_model = info["source_model"]
    if isinstance(src_model, dict):
        say(f"converted from {src_model.get('type')} {src_model.get('folder')} (transformers "
            f"{src_model.get('transformers_version')})")
    exporter = ", ".join(f"{k} {val}" for k, val in info["exporter"].items())
    say(f"exporter       {exporter}; opset {info['opset']}, IR {info['ir_version']}")
    for line in training_lines(info["source_checkpoint"]):
        say(line)
    say(f"total size     {_size(info['total_bytes'])}; checksums "
        f"{'verified' if info['verified'] else 'not checked (--no-verify)'}")


def info_main(argv: List[str]) -> int:
    p = OneLineParser(prog="seq2onnx info", description="Describe a model package: its architecture, vocabulary, "
                      "variants (with how each was checked against PyTorch at export) and exporter.")
    p.add_argument("model_dir", metavar="MODEL_DIR")
    p.add_argument("--json", action="store_true", help="print the description as JSON")
    p.add_argument("--no-verify", action="store_true", help="skip the SHA-256 check of the package files")
    args = p.parse_args(argv)
    info = package_info(args.model_dir, verify=not args.no_verify)
    if args.json:
        print(json.dumps(info, indent=2), file=stdout_text())     # ASCII: \uXXXX for the rest, controls too
    else:
        _print_info(info)
    return 0
