"""How closely two float32 computations of the same model agree, and a comparison of decodes that allows for ties.

Two engines (the PyTorch reference, onnxruntime's array and IO-binding engines, another thread count, another CPU)
compute the same float32 numbers with different kernels: their sums run in different orders and round differently.
The tests compare them within bounds derived here from the arithmetic, never within a figure measured on one CPU.

The bound on one log-prob. The logits are z_i = sum_j h_j W_ij over d = d_model terms, h the output of the decoder's
last LayerNorm (h_j = g_j x_j + b_j with sum_j x_j^2 <= d), so by Cauchy-Schwarz the terms' absolute values add up to
at most S = max_i (sqrt(d) ||g * W_i|| + sum_j |b_j W_ij|) (`Float32Bounds`, from the weights: it holds for every input).
A float32 sum of d terms, in any order, lies within (d - 1) u sum|terms| of the exact sum (u = 2^-24; Higham,
"Accuracy and Stability of Numerical Algorithms", 2nd ed., eq. 3.5), so two engines' logits differ by at most
2 d u S. The log-softmax then subtracts the max (a rounding of at most u 2S) and adds the log of a sum of V terms
in (0, 1] that includes 1 (relative error at most V u): two engines' log-probs differ by at most
    LOG_PROB:  2 u ((d + 2) S + V).
This bound is rigorous for the arithmetic after the last LayerNorm. The layers below reach h through that LayerNorm,
which hands their rounding on as a relative error of the same kind; a reordered float32 sum's error grows like
sqrt(n) u (rounding errors behave as independent: Higham and Mary, SIAM J. Sci. Comput. 41(5), 2019), and the
d u above covers that for every reduction up to n = d^2 terms (d_ff and the source length included).

A score sums T log-probs: float32 in beam search (search.BeamSearch.cum, and the reference's), one rounding of at most
u |score| per addition, so two engines' scores differ by at most T (LOG_PROB + 2 u |score|) (`Float32Bounds.score`).

int8 (`Float32Bounds.of_graph(path, int8=True)`). An int8 graph quantizes each activation tensor at run time: one
scale per row (s = max |h| / 127: export/int8_rows.py), or in packages before it one per tensor and call (s = its
range / 255, the range including 0, taken over every row of the batch). At the input of the logits' projection h_j
lies in [b_j - |g_j| sqrt(d), b_j + |g_j| sqrt(d)] (the LayerNorm above), so s is at most s_max, the larger of
max_j (|b_j| + |g_j| sqrt(d)) / 127 and (max_j (b_j + |g_j| sqrt(d))^+ + max_j (|g_j| sqrt(d) - b_j)^+) / 255.
  * The same batch on two engines: the same scales up to float32 rounding, but a rounding can move an h_j across a half
    step (one int8 value one step apart: logit i moves by s_max |W_ij|; an event of probability about rounding / s
    per value, so one per step is the model). ||W_i|| >= |W_ij|, and the log-softmax (1-Lipschitz in the max norm) at
    most doubles it: LOG_PROB gains INT8_STEP = 2 s_max max_i ||W_i|| (`int8_step`).
  * Another batch (a judge scoring one sentence alone, where the decode batched several; per tensor): another scale,
    so every h_j's rounding error may change, by at most s_max each, all in one direction at worst: a log-prob moves
    by at most INT8_JUDGE = 2 s_max max_i sum_j |W_ij| (`int8_judge`), which the judge's comparisons use in place of
    INT8_STEP.
A lower layer's quantization reaches h through the LayerNorm as the same kind of change.

Ties. Where two candidates' log-probs lie within that bound, either engine may rank either one first: token equality
across engines is then luck. `assert_same_decodes` lets a different hypothesis stand only where a judge (PyTorch, or a
runtime engine, teacher-forced) scores it as tied with the expected one, and checks that the engine scored its own
tokens right.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, List, Sequence

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

if TYPE_CHECKING:                       # the runtime's tests import this module without torch
    import torch

from seq2onnx.runtime.decode.decoding import score
from seq2onnx.runtime.decode.search import Hypothesis, normalize

U = 2.0 ** -24          # float32 unit roundoff: one rounding moves a value by at most u times its size


@dataclass(frozen=True)
class Float32Bounds:
    """The bounds of the module docstring for one model: S (`logit_terms`), d_model and the vocabulary size."""
    logit_terms: float
    d_model: int
    vocab_size: int
    int8_step: float = 0.0      # int8 graphs: one activation flip at the logits' projection (INT8_STEP); 0 for float32
    int8_judge: float = 0.0     # int8 graphs: the projection's input quantized at another scale (INT8_JUDGE)

    @classmethod
    def of_model(cls, model) -> "Float32Bounds":
        """From a PyTorch Transformer's weights."""
        norm = model.decoder_norm if model.cfg.norm_first else model.decoder_layers[-1].sub_ffn.norm
        return cls.of_weights(model.output_projection.weight.detach().numpy().T, norm.weight.detach().numpy(),
                              norm.bias.detach().numpy())

    @classmethod
    def of_graph(cls, path, int8: bool = False) -> "Float32Bounds":
        """From a float32 decoder step graph: the weights of the projection feeding its LogSoftmax and of the
        LayerNorm before it (for a package whose checkpoint is gone). int8: the bounds of the int8 variant quantized
        from it (INT8_STEP added)."""
        graph = onnx.load(str(path)).graph
        inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        producer = {o: n for n in graph.node for o in n.output}
        node = producer[next(n for n in graph.node if n.op_type == "LogSoftmax").input[0]]
        assert node.op_type in ("MatMul", "Gemm"), node.op_type
        weight = inits[node.input[1]]
        if node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute):
            weight = weight.T
        node = producer[node.input[0]]
        while node.op_type != "LayerNormalization":        # Gather / Reshape / Squeeze / Slice of the last position
            node = producer[node.input[0]]
        return cls.of_weights(weight, inits[node.input[1]], inits[node.input[2]], int8)

    @classmethod
    def of_weights(cls, weight, gain, bias, int8: bool = False) -> "Float32Bounds":
        """weight [d, V] of the logits, gain and bias [d] of the LayerNorm before it."""
        w = np.asarray(weight, dtype=np.float64)
        g, b = np.asarray(gain, dtype=np.float64)[:, None], np.asarray(bias, dtype=np.float64)[:, None]
        d = w.shape[0]
        s = math.sqrt(d) * np.linalg.norm(w * g, axis=0) + np.abs(w * b).sum(axis=0)
        step = judge = 0.0
        if int8:
            reach = np.abs(g) * math.sqrt(d)
            # per tensor (range / 255) or, since per_row_activations, per row (max |h| / 127): the larger
            s_max = max((max(float((b + reach).max()), 0.0) + max(float((reach - b).max()), 0.0)) / 255,
                        float((np.abs(b) + reach).max()) / 127)
            step = 2 * s_max * float(np.linalg.norm(w, axis=0).max())
            judge = 2 * s_max * float(np.abs(w).sum(axis=0).max())
        return cls(float(s.max()), d, w.shape[1], step, judge)

    @property
    def logit(self) -> float:
        """How far two float32 engines may put one logit: 2 d u S (the sum's rounding, Higham eq. 3.5, on each side)."""
        return 2 * U * self.d_model * self.logit_terms

    @property
    def log_prob(self) -> float:
        """How far two float32 engines may put one log-prob: 2 u ((d + 2) S + V) (int8: + INT8_STEP)."""
        return 2 * U * ((self.d_model + 2) * self.logit_terms + self.vocab_size) + self.int8_step

    @property
    def judged(self) -> "Float32Bounds":
        """The bounds between an engine and a judge that runs another batch (int8: INT8_JUDGE for INT8_STEP)."""
        return Float32Bounds(self.logit_terms, self.d_model, self.vocab_size, self.int8_judge, self.int8_judge)

    def score(self, steps: int, score: float) -> float:
        """How far two float32 engines may put the score of a hypothesis of `steps` log-probs (EOS included)."""
        return max(steps, 1) * (self.log_prob + 2 * U * abs(score))


def torch_judge(model) -> Callable[[Sequence[int], Sequence[int], bool], List[float]]:
    """PyTorch, teacher-forced: judge(source, tokens, finished) -> the log-prob of each token (then of EOS)."""
    import torch          # here, not above: the web tests' python_reference.py uses this module without PyTorch
    def judge(source, tokens, finished):
        out = list(tokens) + ([model.cfg.eos_id] if finished else [])
        if not out:
            return []
        logp = forced_log_probs(model, source, out[:-1])
        return logp[torch.arange(len(out)), torch.tensor(out)].double().tolist()
    return judge


def engine_judge(engine, config) -> Callable[[Sequence[int], Sequence[int], bool], List[float]]:
    """A runtime engine, teacher-forced (decoding.score): the same judge where no PyTorch model is at hand."""
    def judge(source, tokens, finished):
        logp = score(engine, config, [list(source)], [list(tokens)])[0]
        return logp if finished else logp[:-1]
    return judge


def forced_log_probs(model, source: Sequence[int], target: Sequence[int]) -> torch.Tensor:
    """PyTorch's log-probs, teacher-forced: row t is the distribution after BOS + target[:t]; len(target) + 1 rows."""
    import torch
    cfg = model.cfg
    with torch.no_grad():
        src = torch.tensor([list(source)])
        logits = model(src, torch.ones_like(src), torch.tensor([[cfg.start_id] + list(target)]))[0]
        return torch.log_softmax(logits.float(), dim=-1)


def forced_score(model, source: Sequence[int], target: Sequence[int], finished: bool) -> float:
    """The log-probability PyTorch gives `target` (then EOS, when finished) after `source`, teacher-forced."""
    return float(sum(torch_judge(model)(source, target, finished)))


def hypotheses(token_ids, scores, normalized_scores, finished) -> List[Hypothesis]:
    """A TranslationResult's parallel lists (or the JS result's) -> Hypothesis objects for assert_same_decodes."""
    return [Hypothesis(list(t), s, n, f) for t, s, n, f in zip(token_ids, scores, normalized_scores, finished)]


def results_as_hypotheses(results) -> List[List[Hypothesis]]:
    """translate_batch's results (return_scores=True) -> per source its hypotheses."""
    return [hypotheses(r.token_ids, r.scores, r.normalized_scores, r.finished) for r in results]


def _steps(h) -> int:
    return len(h.tokens) + (1 if h.finished else 0)


def assert_same_decodes(bounds: Float32Bounds, judge, sources: Sequence[Sequence[int]], got: Sequence[Sequence],
                        expected: Sequence[Sequence], *, greedy: bool, eos_id: int, length_penalty: float = 1.0,
                        what: str = "") -> None:
    """`got` decodes `sources` as `expected` does (per source its hypotheses, best first), up to float32 rounding:

      * where the tokens agree: the same `finished`, scores and normalized scores within `bounds.score`;
      * where they differ, the difference must be a tie, judged teacher-forced by `judge` (torch_judge or
        engine_judge). Greedy search: at the first step where they part, the two tokens' log-probs lie within twice
        `bounds.log_prob`. Beam search: the got hypothesis, normalized, within twice `bounds.score` of the expected
        one's. Either way the engine's own score of its tokens must be the judge's, within `bounds.score`.
    Twice: the tie is judged by a third computation, each within half a bound of the exact numbers. The judge's
    comparisons use `bounds.judged` (int8: the judge runs another batch, so other quantization scales).
    """
    assert len(got) == len(expected), what
    judged = bounds.judged
    for i, (src, g, e) in enumerate(zip(sources, got, expected)):
        where = f"{what} source {i}".strip()
        assert len(g) == len(e), where
        for a, b in zip(g, e):
            tol = bounds.score(max(_steps(a), _steps(b)), max(abs(a.score), abs(b.score)))
            if a.tokens == b.tokens and a.finished == b.finished:
                assert a.score == _approx(b.score, tol), where
                length = _steps(b)
                assert a.normalized_score == _approx(b.normalized_score, tol / length ** length_penalty if length
                                                     else tol), where
                continue
            jtol = judged.score(max(_steps(a), _steps(b)), max(abs(a.score), abs(b.score)))
            assert a.score == _approx(sum(judge(src, a.tokens, a.finished)), jtol), \
                f"{where}: the engine's score of its own hypothesis {a.tokens} is not the judge's"
            if greedy:
                ta, tb = a.tokens + [eos_id] * a.finished, b.tokens + [eos_id] * b.finished
                t = next((t for t in range(min(len(ta), len(tb))) if ta[t] != tb[t]), None)
                assert t is not None, f"{where}: {ta} and {tb} part where one of them has ended"
                lp = [judge(src, ta[:t] + [x] * (x != eos_id), x == eos_id)[-1] for x in (ta[t], tb[t])]
                assert abs(lp[0] - lp[1]) <= 2 * judged.log_prob, (
                    f"{where}: {ta} against {tb}: at step {t} the tokens' log-probs differ by {lp[0] - lp[1]:.3g}, "
                    "not a tie")
            else:
                forced = normalize(sum(judge(src, a.tokens, a.finished)), _steps(a), length_penalty)
                assert forced == _approx(b.normalized_score, 2 * jtol / max(_steps(a), 1) ** length_penalty), (
                    f"{where}: {a.tokens} stands where {b.tokens} was expected and is no tie: the judge gives it "
                    f"{forced:.7g}, the expected one {b.normalized_score:.7g}")


def _approx(value: float, tol: float):
    return pytest.approx(value, rel=0, abs=tol)
