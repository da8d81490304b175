"""Timing rounds, fidelity and scaling: the measurements, without any formatting.

Rounds interleave the systems (A B C A B C ...) so that a slow patch of the shared machine hits every
system alike; each case starts with one warm-up run per system that is not counted. Speed is target
tokens per second (batch * generated length / seconds). A short pause before each run lets the
previous system's worker threads (OpenMP, onnxruntime's pool) stop spinning on the shared cores. The ratio to the baseline (CTranslate2
float32) is the median over rounds of the per-round ratio, so both sides come from the same rounds.
"""
from __future__ import annotations

import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from bench.engines import Engine, Tokens


@dataclass
class Case:
    name: str
    batch: int
    beam: int                       # 1 = greedy


CASES = [Case("batch 1 greedy", 1, 1), Case("batch 16 greedy", 16, 1), Case("batch 16 beam 4", 16, 4)]
GPU_CASES = CASES + [Case("batch 64 beam 4", 64, 4)]     # --device cuda: a batch that fills more of the GPU


@dataclass
class Timing:
    system: str
    precision: str
    case: str
    seconds: List[float]                    # one per counted round
    tokens_per_s: float                     # median
    ratio_to_baseline: Optional[float]      # median of per-round (baseline seconds / system seconds)
    vocab_size: Optional[int] = None        # of the model the case ran on (run.py runs more than one)


@dataclass
class CaseResult:
    timings: List[Timing] = field(default_factory=list)
    outputs: Dict[str, Tokens] = field(default_factory=dict)     # system -> tokens of the last run


def make_sources(n: int, src_len: int, vocab_size: int, first_regular_id: int, eos_id: int, seed: int):
    """n sources of src_len ids: src_len - 1 random non-special ids, then EOS (CONTRACTS.md)."""
    rng = random.Random(seed)
    return [[rng.randrange(first_regular_id, vocab_size) for _ in range(src_len - 1)] + [eos_id]
            for _ in range(n)]


PAUSE_S = 0.1


def run_checked(engine: Engine, sources, beam: int, length: int):
    time.sleep(PAUSE_S)
    tokens, seconds = engine.run(sources, beam, length)
    bad = [len(t) for t in tokens if len(t) != length]
    if len(tokens) != len(sources) or bad:
        raise RuntimeError(f"{engine.name} returned {len(tokens)} rows with lengths {bad or length}; "
                           f"expected {len(sources)} rows of exactly {length} tokens")
    return tokens, seconds


def run_case(engines: Sequence[Engine], case: Case, sources, length: int, rounds: int,
             baseline: Optional[str], vocab_size: Optional[int] = None, label: Optional[str] = None,
             before_round: Optional[Callable[[], None]] = None) -> CaseResult:
    """label: the case's name in progress lines (default case.name); vocab_size: recorded in each Timing;
    before_round: called before each counted round (run.py probes the memory bandwidth there)."""
    result = CaseResult()
    seconds: Dict[str, List[float]] = {e.name: [] for e in engines}
    for r in range(rounds + 1):                                   # round 0: warm-up, not counted
        if r > 0 and before_round is not None:
            before_round()
        for e in engines:
            tokens, s = run_checked(e, sources, case.beam, length)
            result.outputs[e.name] = tokens
            if r > 0:
                seconds[e.name].append(s)
        print(f"  {label or case.name}: round {r}/{rounds} done" + (" (warm-up)" if r == 0 else ""),
              file=sys.stderr, flush=True)
    target_tokens = case.batch * length
    for e in engines:
        ratio = None
        if baseline in seconds:
            ratio = statistics.median(b / s for b, s in zip(seconds[baseline], seconds[e.name]))
        result.timings.append(Timing(e.name, e.precision, case.name, seconds[e.name],
                                     target_tokens / statistics.median(seconds[e.name]), ratio, vocab_size))
    return result


def matching_rows(a: Tokens, b: Tokens) -> int:
    return sum(x == y for x, y in zip(a, b))


@dataclass
class Scaling:
    system: str
    kind: str                 # "generated" (source 32, vary generated length) or "source" (vary source length)
    size: int                 # the generated length or the source length
    ms_per_token: float       # median over rounds, batch 1 greedy


def run_scaling(engines: Sequence[Engine], make, generated: Sequence[int], source_lengths: Sequence[int],
                src_len: int, length: int, rounds: int) -> List[Scaling]:
    """Per-token time at batch 1 greedy; make(src_len) -> one-source batch. Interleaved like run_case."""
    points = [("generated", n, make(src_len), n) for n in generated]
    points += [("source", s, make(s), length) for s in source_lengths]
    out = []
    for kind, size, sources, n_tokens in points:
        times: Dict[str, List[float]] = {e.name: [] for e in engines}
        for r in range(rounds + 1):
            for e in engines:
                _, s = run_checked(e, sources, 1, n_tokens)
                if r > 0:
                    times[e.name].append(s)
        for e in engines:
            out.append(Scaling(e.name, kind, size, 1000 * statistics.median(times[e.name]) / n_tokens))
        print(f"  scaling: {kind} {size} done", file=sys.stderr, flush=True)
    return out
