"""How long `seq2onnx convert` takes on an OPUS-MT-en-de-shaped folder, step by step, and its peak memory.

    python bench/convert.py                            # fp32 and --int8 once each: bench/results/convert.{json,md}
    python bench/convert.py --against main --rounds 2  # also the code at git revision main, interleaved A B A B
    python bench/convert.py --against main --together  # the two sides at the same time instead, each round
    python bench/convert.py --modes int8 --profile     # py-spy record of each run (bench/.cache/convert/profile-*.txt)
    python bench/convert.py --shape nllb-600m --name convert-nllb-600m   # NLLB-200-distilled-600M's shape
    python bench/convert.py --shape nllb-1.3b --modes int8 --name convert-nllb-1.3b     # 1.37B parameters

The folder (built once into bench/.cache/convert/opus-mt-en-de-shaped/, seeded, so every build is the same):
Helsinki-NLP/opus-mt-en-de's shape, 74.4M parameters: MarianMTModel d_model 512, 6+6 layers, 8 heads, FFN 2048,
swish, sinusoids, embeddings scaled by sqrt(d_model), shared and tied, final_logits_bias, vocabulary 58,101
(</s> 0, <unk> 1, the pieces of two small SentencePiece unigram models trained here on gettext text, fillers up to
58,100, <pad> last: the ids of the real vocab.json's layout), and its generation_config (beam 4, max_length 512,
bad_words [pad], forced EOS, renormalize_logits). Random weights as tests/hf_folders.py makes them (its init std 0.2 scaled to d_model 512,
final_logits_bias random, a length signal so that greedy outputs end after 4-30 tokens as a trained model's do,
EOS calibrated on gettext sentences), so the gate against transformers decodes sentences of a trained model's
lengths, and the int8 variant passes its gate.

--shape nllb-1.3b / m2m100-1.2b: the same at NLLB-200-distilled-1.3B's and M2M100 1.2B's shapes (24+24 layers, FFN
8192; M2M100's vocabulary 128,112): 1.37B / 1.24B parameters, 5.1 / 4.6 GiB in float32.

--shape nllb-600m (built once into bench/.cache/convert/nllb-600m-shaped/, seeded): NLLB-200-distilled-600M's shape,
615M parameters (2.3 GiB in float32): M2M100ForConditionalGeneration d_model 1024, 12+12 layers, 16 heads, FFN 4096,
relu, pre-LN, vocabulary 256,206 (the tokenizer of tests/hf_folders.py's build_nllb, its ids at the bottom of the
table), max_position_embeddings 1024, as build_nllb makes it otherwise (random weights, length signal, EOS
calibrated; init std scaled to d_model 1024); its generation_config NLLB's (greedy, max_length 200).

Each run is a process of its own: `seq2onnx convert FOLDER OUT --overwrite [--int8]` (runtime/cli/main.py main, so the
code under test is whatever seq2onnx the process imports). Its progress lines on stderr are timestamped as they
arrive; a step's seconds are the time from the previous line to its own (the first step: from the process's start,
imports included). Peak RSS: the process's VmHWM at its end (bench/memory.py: why not ru_maxrss), or the largest sum
of its and its forked children's Pss sampled (RssSampler), where larger. With --against
REV, REV's code runs in a `git worktree` (bench/ab_code.py's side_path), each round A (REV) then B (this tree) per
mode, or both at once (--together), so a busy moment of the machine hits both; the ratio per step is the median over
rounds of A / B.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

WORK = ROOT / "bench" / ".cache" / "convert"
RESULTS = ROOT / "bench" / "results"
FOLDER_NAME = "opus-mt-en-de-shaped"
# Helsinki-NLP/opus-mt-en-de's config.json and generation_config.json (its ids: </s> 0, <unk> 1, <pad> 58100)
VOCAB = 58101
SHAPE = dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8,
             encoder_ffn_dim=2048, decoder_ffn_dim=2048, activation_function="swish", max_position_embeddings=512,
             scale_embedding=True, share_encoder_decoder_embeddings=True, tie_word_embeddings=True)
GENERATION = dict(num_beams=4, renormalize_logits=True, max_length=512)
CALIBRATION_LENGTH = 49           # generate()'s max_length while EOS is calibrated (the gate decodes <= 48 tokens)
SPM_VOCAB = 400                   # pieces of each SentencePiece model (tests/hf_folders.py's)
SEED = 1
# tests/hf_folders.py's init std (0.2 at d_model 64) at the same scale of a row's norm at d_model 512: with 0.2 itself
# the logits' spread made float32 rounding differ by 3e-2 between ONNX and PyTorch (the fp32 gate refused it)
INIT_STD = 0.2 * (64 / 512) ** 0.5
STEP = re.compile(r"^\[(\d+)/(\d+)\] ([\w-]+)")        # a step's progress line: [3/5] parity: ...
SUB_STEP = re.compile(r"^ +(\w+: [^(]+?) \(\d+\.\ds\)$")    # a part of one, indented: "      int8: ... (1.2s)"
MODES = ("fp32", "int8")
RSS_PERIOD = 0.1                  # seconds between two samples of a run's resident memory (RssSampler)
# NLLB-200-distilled-600M's config.json (facebook/nllb-200-distilled-600M)
NLLB_600M = dict(vocab_size=256206, d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                 decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024)
NLLB_MAX_LENGTH = 200
# facebook/nllb-200-distilled-1.3B's and facebook/m2m100_1.2B's config.json: 24+24 layers, FFN 8192 (1.37B and 1.24B
# parameters, 5.1 and 4.6 GiB in float32); M2M100's vocabulary 128,112 (the NLLB-shaped tokenizer's ids at its bottom)
NLLB_1_3B = dict(NLLB_600M, encoder_layers=24, decoder_layers=24, encoder_ffn_dim=8192, decoder_ffn_dim=8192)
M2M100_1_2B = dict(NLLB_1_3B, vocab_size=128112)
FAIRSEQ_SHAPES = {"nllb-600m": NLLB_600M, "nllb-1.3b": NLLB_1_3B, "m2m100-1.2b": M2M100_1_2B}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- the folder -----------------------------------------------------------------------------------------------
def build_nllb_folder(folder: Path, shape: Dict[str, int] = NLLB_600M) -> Path:
    """The NLLB-200-distilled-600M-shaped folder (module doc) at `folder`, or one of `shape` (FAIRSEQ_SHAPES),
    unless it is there already."""
    if (folder / "model.safetensors").is_file():
        return folder
    from bench.base_model import atomic_folder

    def write(tmp: Path) -> None:
        from transformers import M2M100Config, NllbTokenizer
        from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

        from tests import hf_folders as H

        H._fairseq_spm(tmp)
        tokenizer = NllbTokenizer.from_pretrained(str(tmp), src_lang="eng_Latn",
                                                  extra_special_tokens=list(FAIRSEQ_LANGUAGE_CODES))
        tokenizer.save_pretrained(str(tmp))
        ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<s>", "<pad>", "</s>")}
        std = H.FAIRSEQ_LENGTH["init_std"] * (H.TINY["d_model"] / shape["d_model"]) ** 0.5
        config = M2M100Config(**shape, activation_function="relu", scale_embedding=True, dropout=0.1,
                              attention_dropout=0.1, activation_dropout=0.0, encoder_layerdrop=0.05,
                              decoder_layerdrop=0.05, init_std=std, pad_token_id=ids["<pad>"],
                              bos_token_id=ids["<s>"], eos_token_id=ids["</s>"], decoder_start_token_id=ids["</s>"])
        H._save_model(tmp, config, H._fairseq_model, SEED, H._shift_fairseq_eos,
                      dict(max_length=CALIBRATION_LENGTH, bos_token_id=ids["<s>"], eos_token_id=ids["</s>"],
                           pad_token_id=ids["<pad>"], decoder_start_token_id=ids["</s>"]))
        gen = json.loads((tmp / "generation_config.json").read_text())
        gen["max_length"] = NLLB_MAX_LENGTH
        (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2))

    start = time.perf_counter()
    atomic_folder(folder, write)
    log(f"folder: {folder} built ({time.perf_counter() - start:.0f}s)")
    return folder


SHAPES = {"opus-mt-en-de": FOLDER_NAME, **{name: f"{name}-shaped" for name in FAIRSEQ_SHAPES}}


def build_folder(folder: Path) -> Path:
    """The OPUS-MT-en-de-shaped folder (module doc) at `folder`, or the FAIRSEQ_SHAPES one its name says, unless it
    is there already."""
    for name, shape in FAIRSEQ_SHAPES.items():
        if folder.name == SHAPES[name]:
            return build_nllb_folder(folder, shape)
    if (folder / "model.safetensors").is_file():
        return folder
    from bench.base_model import atomic_folder

    def write(tmp: Path) -> None:
        from transformers import GenerationConfig, MarianConfig

        from tests import hf_folders as H

        pairs = H.gettext_pairs("de")
        src_spm = H.train_spm([s for s, _ in pairs], "unigram", SPM_VOCAB)
        tgt_spm = H.train_spm([t for _, t in pairs], "unigram", SPM_VOCAB)
        H.write_marian_tokenizer(tmp, src_spm, tgt_spm)          # the tokenizer files, then vocab.json at full size
        vocab = H.marian_vocab(src_spm, tgt_spm)
        del vocab["<pad>"]
        vocab.update({f"<filler_{i}>": i for i in range(len(vocab), VOCAB - 1)})
        vocab["<pad>"] = VOCAB - 1
        (tmp / "vocab.json").write_text(json.dumps(vocab, indent=2, ensure_ascii=False), encoding="utf-8")
        pad_added_token(tmp, vocab["<pad>"])
        pad, eos = vocab["<pad>"], vocab["</s>"]
        config = MarianConfig(vocab_size=VOCAB, decoder_vocab_size=VOCAB, **SHAPE, dropout=0.1, attention_dropout=0.0,
                              activation_dropout=0.0, init_std=INIT_STD, pad_token_id=pad,
                              eos_token_id=eos, bos_token_id=eos, decoder_start_token_id=pad, forced_eos_token_id=eos)
        generation = dict(bad_words_ids=[[pad]], forced_eos_token_id=eos, bos_token_id=eos, eos_token_id=eos,
                          pad_token_id=pad, decoder_start_token_id=pad)
        H._seeded(SEED)
        model = H._marian_model(config).eval()
        model.generation_config = GenerationConfig(**dict(GENERATION, max_length=CALIBRATION_LENGTH), **generation)
        H._shift_marian_eos(model)(H.calibrate_eos(model, tmp))
        model.generation_config = GenerationConfig(**GENERATION, **generation)
        model.save_pretrained(str(tmp), safe_serialization=True)
        model.generation_config.save_pretrained(str(tmp))

    start = time.perf_counter()
    atomic_folder(folder, write)
    log(f"folder: {folder} built ({time.perf_counter() - start:.0f}s)")
    return folder


def pad_added_token(folder: Path, pad_id: int) -> None:
    """tokenizer_config.json's added token <pad> at pad_id, as the real folder's ("58100"): the small tokenizer it was
    written for had <pad> after its own pieces, and transformers' MarianTokenizer takes the id from there (an old
    id gave <pad> the id of a filler, and ct2-transformers-converter refused the vocabulary)."""
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    added = config.get("added_tokens_decoder", {})
    for key in [k for k, v in added.items() if v.get("content") == "<pad>"]:
        added[str(pad_id)] = added.pop(key)
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")


# --- one run ----------------------------------------------------------------------------------------------------
def worker(argv: List[str]) -> int:
    """`seq2onnx convert ARGV` in this process; then its peak RSS (MiB) as the last line on stderr."""
    from bench.memory import own_peak_rss_mib
    from seq2onnx.runtime.cli.main import main

    code = main(["convert", *argv])
    times = os.times()          # CPU seconds: what a busy machine's load disturbs less than the wall clock
    print(json.dumps({"peak_rss_mib": own_peak_rss_mib(),
                      "cpu_seconds": times.user + times.system + times.children_user + times.children_system}),
          file=sys.stderr, flush=True)
    return code


def side_env(code: Optional[Path]) -> Dict[str, str]:
    """The environment of a run of `code`'s seq2onnx (a side_path folder), or of this tree's (None)."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    return env


def run_once(folder: Path, out: Path, mode: str, code: Optional[Path], profile: Optional[Path] = None,
             tag: str = "") -> Dict[str, Any]:
    """One conversion in a process of its own -> {"steps": [{"step", "seconds", "line"}], "seconds",
    "peak_rss_mib", "cpu_seconds"}; raises RuntimeError with its last lines if it fails."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(folder), str(out), "--overwrite"]
    # random weights: the int8 variant fails its gate (top-1 agreement); its figures are measured all the same
    cmd += ["--int8", "--skip-int8-validation"] if mode == "int8" else []
    if profile is not None:
        cmd = [shutil.which("py-spy") or "py-spy", "record", "-r", "20", "-f", "raw", "-o", str(profile),
               "--"] + cmd
    start = last = time.perf_counter()
    steps, lines, peak, cpu = [], [], None, None
    proc = subprocess.Popen(cmd, env=side_env(code), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = RssSampler(proc.pid if profile is None else None)
    for line in proc.stderr:
        now = time.perf_counter()
        line = line.rstrip("\n")
        lines.append(line)
        if line.startswith("{") and "peak_rss_mib" in line:
            peak, cpu = json.loads(line)["peak_rss_mib"], json.loads(line)["cpu_seconds"]
            continue
        step_peak = sampler.take()
        log(f"  {tag}{now - start:7.1f}s  {line}" + (f"  [peak RSS {step_peak:.0f} MiB]" if step_peak else ""))
        m = STEP.match(line.strip())
        sub = SUB_STEP.match(line)
        name = m.group(3) if m else "gate" if line.strip().startswith("gate ") else sub.group(1) if sub else None
        if name:
            steps.append({"step": name, "seconds": now - last, "line": line.strip(), "peak_rss_mib": step_peak})
            last = now
    proc.stdout.read()
    sampler.stop()
    if peak is not None:            # the process's own VmHWM, or its children's share with it where larger
        peak = max(peak, sampler.peak)
    if proc.wait() != 0:
        raise RuntimeError(f"seq2onnx convert ({mode}) failed ({proc.returncode}):\n" + "\n".join(lines[-5:]))
    return {"steps": steps, "seconds": time.perf_counter() - start, "peak_rss_mib": peak, "cpu_seconds": cpu}


class RssSampler:
    """The largest resident memory of process `pid` and its children (None: nothing sampled) between two take()
    calls, read from /proc every RSS_PERIOD seconds: which step of a conversion its peak comes from (VmHWM gives the
    process's peak only, and not its children's: the converter forks children that share its pages, export/beside.py).
    A process alone: its VmRSS; with children: the sum of their proportional set sizes (Pss: a page the forked child
    shares with its parent counted once)."""

    def __init__(self, pid: Optional[int]) -> None:
        import threading

        self.pid, self.top, self.peak, self.done = pid, 0.0, 0.0, threading.Event()
        self.lock = threading.Lock()
        if pid is not None:
            threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.done.wait(RSS_PERIOD):
            try:
                mib = self.resident_mib()
            except OSError:
                return
            if mib:
                with self.lock:
                    self.top, self.peak = max(self.top, mib), max(self.peak, mib)

    def resident_mib(self) -> float:
        tree = [self.pid] + descendants(self.pid)
        if len(tree) == 1:
            m = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{self.pid}/status").read_text(), re.M)
            return int(m.group(1)) / 1024 if m else 0.0
        total = 0
        for pid in tree:
            try:
                m = re.search(r"^Pss:\s+(\d+) kB", Path(f"/proc/{pid}/smaps_rollup").read_text(), re.M)
            except OSError:                 # a child that ended meanwhile
                continue
            total += int(m.group(1)) if m else 0
        return total / 1024

    def take(self) -> Optional[float]:
        """The largest RSS (MiB) since the last take, then start again; None without a pid."""
        if self.pid is None:
            return None
        with self.lock:
            top, self.top = self.top, 0.0
        return top

    def stop(self) -> None:
        self.done.set()


def descendants(pid: int) -> List[int]:
    """The process ids of `pid`'s children, theirs, and so on (/proc/PID/task/TID/children)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


# --- the report ---------------------------------------------------------------------------------------------------
def summarise(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Runs of one side and mode -> the median seconds of each step (in the order they ran), total, peak RSS."""
    order: List[str] = []
    for run in runs:
        order += [s["step"] for s in run["steps"] if s["step"] not in order]
    return {"steps": {name: statistics.median(sum(s["seconds"] for s in r["steps"] if s["step"] == name) for r in runs)
                      for name in order},
            "seconds": statistics.median(r["seconds"] for r in runs),
            "cpu_seconds": statistics.median(r["cpu_seconds"] or 0 for r in runs),
            "peak_rss_mib": max(r["peak_rss_mib"] or 0 for r in runs), "runs": runs}


def markdown(data: Dict[str, Any]) -> str:
    from bench.report import machine_text

    sides = list(data["sides"])
    lines = [f"# `seq2onnx convert` of an {data['folder']['name']}-shaped folder: seconds per step and peak memory", "",
             f"{data['folder']['parameters'] / 1e6:.1f}M parameters (bench/convert.py's docstring has the folder). "
             f"Each run a process of its own; a step's seconds: from the previous progress line to its own (the first "
             f"from the process's start, imports included); the median of {data['rounds']} round(s)"
             + (", the sides interleaved (A B A B ...): ratio = A / B per round, the median" if len(sides) > 1 else "")
             + ". The machine was shared with other work: compare the sides of one run, not runs.", ""]
    for mode in data["modes"]:
        heads = [f"{side} ({data['sides'][side]})" for side in sides]
        lines += [f"## {mode}", "", "| step | " + " | ".join(heads) + (" | A / B |" if len(sides) > 1 else " |"),
                  "|---|" + "---:|" * (len(sides) + (len(sides) > 1))]
        results = {side: data["results"][side][mode] for side in sides}
        names: List[str] = []
        for r in results.values():
            names += [n for n in r["steps"] if n not in names]
        for name in names + ["total", "CPU seconds (user+sys)", "peak RSS (MiB)"]:
            cells = []
            for side in sides:
                r = results[side]
                value = (r["seconds"] if name == "total" else r["peak_rss_mib"] if name.startswith("peak")
                         else r["cpu_seconds"] if name.startswith("CPU") else r["steps"].get(name))
                cells.append("-" if value is None else f"{value:.0f}" if name.startswith("peak") else f"{value:.1f}")
            if len(sides) > 1:
                ratio = data["ratios"][mode].get(name)
                cells.append("-" if ratio is None else f"{ratio:.2f}x")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append("Machine: " + machine_text(data["machine"], f"load average {data['load_avg_before'][0]:.2f} before, "
                                             f"{data['load_avg_after'][0]:.2f} after"))
    return "\n".join(lines)


def ratios(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, float]:
    """Per step, total and peak: the median over rounds of A's / B's."""
    out = {}
    pairs = list(zip(a["runs"], b["runs"]))

    def step(run, name):
        return sum(s["seconds"] for s in run["steps"] if s["step"] == name)
    for name in set(a["steps"]) & set(b["steps"]):
        out[name] = statistics.median(step(x, name) / max(step(y, name), 1e-9) for x, y in pairs)
    out["total"] = statistics.median(x["seconds"] / y["seconds"] for x, y in pairs)
    out["CPU seconds (user+sys)"] = statistics.median(x["cpu_seconds"] / y["cpu_seconds"] for x, y in pairs)
    out["peak RSS (MiB)"] = a["peak_rss_mib"] / b["peak_rss_mib"]
    return out


def main(argv: Sequence[str] = ()) -> int:
    argv = list(argv) or sys.argv[1:]
    if argv[:1] == ["--worker"]:
        return worker(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=list(SHAPES), default="opus-mt-en-de", help="the folder's (default %(default)s)")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--against", metavar="REV", help="also the code at this git revision, interleaved (A = REV)")
    ap.add_argument("--together", action="store_true",
                    help="with --against: run the two sides at the same time (on 2 cores: each gets one)")
    ap.add_argument("--profile", action="store_true", help="py-spy record each run into --work (collapsed stacks, profile-*.txt)")
    ap.add_argument("--work", type=Path, default=WORK)
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--name", default="convert", help="stem of the results files (default %(default)s)")
    a = ap.parse_args(argv)
    from bench.ab_code import side_path
    from bench.report import machine, write

    work = a.work.absolute()
    folder = build_folder(work / SHAPES[a.shape])
    config = json.loads((folder / "config.json").read_text())
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        sides: Dict[str, Optional[Path]] = {}
        names = {}
        if a.against:
            old_tree = Path(tmp) / "old"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old_tree), a.against],
                           check=True)
            sides["A"] = side_path(Path(tmp) / "a", old_tree)
            names["A"] = f"{a.against} {subprocess.run(['git', '-C', str(old_tree), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()}"
        sides["B" if a.against else "this tree"] = None
        names["B" if a.against else "this tree"] = "working tree"
        runs: Dict[str, Dict[str, List[Dict[str, Any]]]] = {s: {m: [] for m in a.modes} for s in sides}
        try:
            for r in range(a.rounds):
                for mode in a.modes:
                    def one(side: str) -> Dict[str, Any]:
                        profile = work / f"profile-{side.replace(' ', '_')}-{mode}-{r}.txt" if a.profile else None
                        return run_once(folder, Path(tmp) / f"package-{side}-{mode}".replace(" ", "_"), mode,
                                        sides[side], profile, f"{side} " if len(sides) > 1 else "")
                    log(f"round {r + 1}/{a.rounds}, {mode}: " + ", ".join(f"{s} ({names[s]})" for s in sides)
                        + (" at the same time" if a.together else ""))
                    if a.together:           # both sides start together: the machine's load hits both alike
                        with ThreadPoolExecutor(len(sides)) as pool:
                            done = dict(zip(sides, pool.map(one, sides)))
                    else:
                        done = {side: one(side) for side in sides}
                    for side, run in done.items():
                        runs[side][mode].append(run)
        finally:
            if a.against:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(tmp) / "old")],
                               check=False)
    results = {side: {mode: summarise(runs[side][mode]) for mode in a.modes} for side in sides}
    data = {"machine": machine(None), "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
            "folder": {"name": a.shape, "config": {k: config.get(k) for k in (*SHAPE, "vocab_size", "model_type")},
                       "parameters": parameters(config)},
            "rounds": a.rounds, "modes": a.modes, "sides": names, "results": results}
    if a.against:
        data["ratios"] = {mode: ratios(results["A"][mode], results["B"][mode]) for mode in a.modes}
    md = markdown(data)
    write(a.results, a.name, data, md)
    print(md)
    return 0


def parameters(config: Dict[str, Any]) -> int:
    """A MarianMT / M2M100 config's parameters (tied embeddings once, Marian's final_logits_bias, M2M100's final
    LayerNorms, no sinusoid table)."""
    d, f, v = config["d_model"], config["encoder_ffn_dim"], config["vocab_size"]
    attention = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    encoder = config["encoder_layers"] * (attention + ffn + 2 * 2 * d)
    decoder = config["decoder_layers"] * (2 * attention + ffn + 3 * 2 * d)
    return v * d + (v if config["model_type"] == "marian" else 2 * 2 * d) + encoder + decoder


if __name__ == "__main__":
    sys.exit(main())
