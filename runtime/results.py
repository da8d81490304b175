"""What the Translator returns: TranslationResult (translate_batch) and ScoringResult (score_batch), in
CTranslate2's terms. docs/CONTRACTS.md lists their fields for both runtimes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple


@dataclass
class TranslationResult:
    hypotheses: List[str]                       # best first
    token_ids: List[List[int]]                  # the hypotheses' target ids, without EOS
    scores: Optional[List[float]] = None        # sum of log-probs (return_scores=True)
    normalized_scores: Optional[List[float]] = None   # score / length ** length_penalty: the ranking score
    truncated: bool = False                     # the source was cut to max_input_length
    finished: List[bool] = field(default_factory=list)   # per hypothesis: ended with EOS; False: stopped at
                                                # the length limit (or where the options forbade every token)
    attention: Optional[List[List[List[float]]]] = None   # return_attention: per hypothesis [target tokens]
                                                # [source tokens + EOS], rows sum to 1 (runtime/decode/alignment.py)
    alignment: Optional[List[List[Tuple[int, int]]]] = None   # return_alignment: per hypothesis sorted
                                                # (source word, target word) pairs (runtime/decode/alignment.py)
    constraints_met: Optional[List[bool]] = None   # constraints: per hypothesis, it holds every phrase; False when
                                                # no hypothesis within the length limit did (those missing fewest
                                                # phrases are returned then, best first)
    source_unknown_tokens: int = 0              # source pieces the tokenizer cannot cover (its <unk>: characters
                                                # it never saw in training); > 0: outside what the model knows


@dataclass
class ScoringResult:
    """score_batch's answer for one pair: the target's tokens, EOS last, and the log-prob of each."""
    tokens: List[str]
    log_probs: List[float]
