"""The numpy search's per-step stage at OPUS-MT's shape: the logit filters (suppress <pad>, renormalize) and beam
search's selection of the 2K best candidates, or greedy's argmax, on random log-probs [rows, 58101].

    python bench/search_stage.py [--rows 64] [--beam 4] [--rounds 30]

Times today's stage against the stage as it was (its code copied below: renormalize through copies of the finite
rows, the candidates cum + log-probs written out before the selection, greedy's max and then argmax), interleaved
round by round, and prints the ratio of the medians (a busy machine moves both alike); then the search head graph
(gather_graph.search_head_model_bytes, the device search) run on the CPU provider against today's numpy stage."""
from __future__ import annotations

import argparse
import time

import numpy as np

from seq2onnx.runtime.decode.logit_filters import ForceToken, SuppressTokens, renormalize
from seq2onnx.runtime.decode.top_candidates import top_beam_candidates, top_candidates

VOCAB, PAD, EOS = 58101, 58100, 0          # OPUS-MT en-de: vocabulary 58101, <pad> the last id


def renormalize_before(log_probs, tokens, row_example, step) -> None:
    best = log_probs.max(axis=1, keepdims=True)
    finite = np.isfinite(best[:, 0])
    shifted = log_probs[finite] - best[finite]
    log_probs[finite] = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def beam_before(cum, log_probs, k):
    a, v = len(cum), log_probs.shape[1]
    cand = (cum[:, :, None] + log_probs.reshape(a, k, v)).reshape(a, k * v)
    order = top_candidates(cand, 2 * k)
    return np.take_along_axis(cand, order, axis=1), order


def beam_now(cum, log_probs, k):
    a, v = len(cum), log_probs.shape[1]
    order = top_beam_candidates(cum, log_probs, 2 * k)
    beam, token = np.divmod(order, v)
    return cum[np.arange(a)[:, None], beam] + log_probs[np.arange(a)[:, None] * k + beam, token], order


def greedy_before(log_probs):
    best = log_probs.max(axis=1)
    return log_probs.argmax(axis=1), best


def greedy_now(log_probs):
    first = log_probs.argmax(axis=1)
    return first, log_probs[np.arange(len(first)), first]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, (args.rows, VOCAB)).astype(np.float32)
    raw = (logits - logits.max(1, keepdims=True))
    raw -= np.log(np.exp(raw).sum(1, keepdims=True))                # a decoder's log-softmax
    cum = np.sort(rng.normal(-5, 2, (args.rows // args.beam, args.beam)).astype(np.float32), axis=1)[:, ::-1].copy()
    suppress = SuppressTokens([PAD])
    k = args.beam

    force_eos = ForceToken(EOS, np.full(args.rows, 3))                   # every row's last step

    def stage(renorm, select, renormalizing, forcing=False):
        def run():
            lp = raw.copy()
            t = time.perf_counter()
            suppress(lp, None, None, 3)
            if forcing:
                force_eos(lp, None, np.arange(args.rows), 3)
            if renormalizing:
                renorm(lp, None, None, 3)
            out = select(lp)
            return time.perf_counter() - t, out
        return run

    cases = {}
    for renormalizing in (True, False):
        name = "renormalize" if renormalizing else "suppress only"
        cases[f"beam {k}, {name}"] = (stage(renormalize_before, lambda lp: beam_before(cum, lp, k), renormalizing),
                                      stage(renormalize, lambda lp: beam_now(cum, lp, k), renormalizing))
        cases[f"greedy, {name}"] = (stage(renormalize_before, greedy_before, renormalizing),
                                    stage(renormalize, greedy_now, renormalizing))
    cases[f"beam {k}, forced EOS step"] = (
        stage(renormalize_before, lambda lp: beam_before(cum, lp, k), True, forcing=True),
        stage(renormalize, lambda lp: beam_now(cum, lp, k), True, forcing=True))
    print(f"[{args.rows}, {VOCAB}] log-probs, {args.rounds} rounds interleaved; median ms before / now (ratio)")
    for name, (before, now) in cases.items():
        b_out, n_out = before()[1], now()[1]
        assert all(np.array_equal(x, y) for x, y in zip(b_out, n_out)), name      # the same picks and scores
        times = {"before": [], "now": []}
        for _ in range(args.rounds):
            times["before"].append(before()[0])
            times["now"].append(now()[0])
        b, n = (float(np.median(times[x])) * 1e3 for x in ("before", "now"))
        print(f"  {name:26s} {b:8.2f} / {n:8.2f}   x{b / n:.2f} faster")
    head_on_cpu(raw, cum, k, args.rounds)


def head_on_cpu(raw: np.ndarray, cum: np.ndarray, k: int, rounds: int) -> None:
    """The search head graph (beam, renormalize) on the CPU provider, 2 threads, against today's numpy stage."""
    import onnxruntime as ort

    from seq2onnx.runtime.engine.gather_graph import search_head_model_bytes

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 2, 1
    head = ort.InferenceSession(search_head_model_bytes(True, False, True), so, providers=["CPUExecutionProvider"])
    bias = np.zeros((1, VOCAB), dtype=np.float32)
    bias[0, PAD] = -np.inf
    feeds = {"log_probs": raw, "bias": bias, "check_id": np.array([EOS]), "cum": cum.reshape(-1, 1),
             "shape": np.array([len(cum), k * VOCAB]), "k": np.array([2 * k])}
    times = {"numpy": [], "head": []}
    for _ in range(rounds):
        lp = raw.copy()
        t = time.perf_counter()
        SuppressTokens([PAD])(lp, None, None, 3)
        renormalize(lp, None, None, 3)
        numpy_picks = beam_now(cum, lp, k)[1]
        times["numpy"].append(time.perf_counter() - t)
        t = time.perf_counter()
        head_picks = head.run(["indices"], feeds)[0]
        times["head"].append(time.perf_counter() - t)
    n, h = (float(np.median(times[x])) * 1e3 for x in ("numpy", "head"))
    print(f"  beam {k}, renormalize: numpy {n:.2f} ms, the search head graph on the CPU provider {h:.2f} ms "
          f"(x{n / h:.2f}); same picks: {np.array_equal(numpy_picks, head_picks)}")


if __name__ == "__main__":
    main()
