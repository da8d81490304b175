"""A/B of `seq2onnx serve --batching continuous` flags on the serve bench's model and load (bench/serve.py), each
variant a server process of its own, measured in turn with the same closed-loop clients:

    python bench/serve_ab.py int8 1 16,64 --min-length-class=16 --min-length-class=4096

Arguments: precision (int8 or fp32), beam size, client counts, then each variant's extra server flags (one
argument a variant; several flags joined by spaces). Environment: DUR (seconds counted a cell, default 8), REPS
(rounds over the variants, default 1). Prints a line a cell; times on a shared machine are noise: alternate rounds.
"""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.base_model import prepare  # noqa: E402
from bench.serve import PRECISIONS, Server, Settings, free_port, run_cell, sentences  # noqa: E402

prec, beam, clients = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",")]
variants = sys.argv[4:]
st = Settings(duration=float(os.environ.get("DUR", "8")), warmup=2.0, rounds=1)
folder = ROOT / "bench" / ".cache" / "base"          # bench/serve.py's model, built by it
bm = prepare(folder, "base", st.vocab_size, st.seed)
items, _ = sentences(bm.tokens, st)
for rep in range(int(os.environ.get("REPS", "1"))):
    for variant in variants:
        port = free_port()
        cmd = [sys.executable, "-m", "seq2onnx.runtime.cli", "serve", str(folder / "package"), "--port", str(port),
               "--batching", "continuous", "--device", "cpu", "--compute-type", PRECISIONS[prec], "--intra-threads",
               str(st.threads), "--inter-threads", "1", "--log-level", "warning", *variant.split()]
        server = Server(cmd, port, ROOT / "bench" / ".cache" / "serve_ab.log")
        try:
            server.wait_ready()
            for n in clients:
                c = run_cell(server.url, items, n, beam, st)
                print(f"{prec} beam {beam} {n:3d} clients {variant:28s} {c['sentences_per_s']:7.1f} sent/s  p50 "
                      f"{c['p50_ms']:7.1f}  p99 {c['p99_ms']:7.1f} ms  peak RSS {server.peak_rss_mib():.0f} MiB",
                      flush=True)
        finally:
            server.stop()
