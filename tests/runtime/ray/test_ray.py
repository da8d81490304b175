"""Ray (runtime/ray/, the `ray` extra) on a real cluster of two nodes on this machine (`ray start --head` and a second
`ray start --address` with a resource of its own, one CPU each, small object stores, under a temporary folder, killed
at the end), with the shipped model numbers-en-de (no trained-model fixture):
  - `seq2onnx translate-dataset` on 50,000 numbers, 2 actors: its output is `seq2onnx translate`'s, byte for byte,
    and its errors file holds the command's warnings;
  - one actor's process killed mid-job (JSONL in, with bad lines and ids; Parquet out): every row once, in order,
    each translation the command's, the bad lines' errors recorded, the actor started again;
  - `seq2onnx ray-serve` with two replicas behind Serve's proxy: LibreTranslate's client and /v1 answer as sequential
    Translator.translate_batch does; a replica killed under load is started again by Serve, and clients that retry
    a failed request (as Serve's guide advises) lose nothing; SIGTERM removes the replicas.
The single-process reference runs while the cluster starts (the machine has 2 cores)."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

pytest.importorskip("ray", reason="the ray extra: pip install '.[ray]'")
httpx = pytest.importorskip("httpx", reason="the test extra")
import pyarrow.parquet as pq  # noqa: E402
from libretranslatepy import LibreTranslateAPI  # noqa: E402
from num2words import num2words  # noqa: E402

from seq2onnx.runtime import Translator  # noqa: E402
from tests import REPO  # noqa: E402

sys.path.insert(0, str(REPO))      # the repository root: `bench` package
from bench.ray_scaling import RAY_ENV, LocalCluster, free_port  # noqa: E402

MODEL = "numbers-en-de"
LINES = 50_000
FAULT_LINES = 20_000
GREEDY = ["--beam-size", "1"]          # the CLI's default is beam 4; greedy keeps the file within its time budget
CLI = [sys.executable, "-m", "seq2onnx.runtime.cli"]
MAP_WORKER = "ray::MapWorker(MapBatches(Translate))"
REPLICA = "ray::ServeReplica:seq2onnx:TranslationServer"


def _numbers(n: int, seed: int) -> List[str]:
    rng = random.Random(seed)
    return [num2words(rng.randrange(1000)) for _ in range(n)]


class Reference:
    """`seq2onnx translate` (the single-process command) on a file, in the background."""

    def __init__(self, source: Path, *flags: str):
        self.output = source.with_suffix(".cli")
        self.proc = subprocess.Popen([*CLI, "translate", MODEL, "-i", str(source), "-o", str(self.output), *flags],
                                     stderr=subprocess.PIPE)

    def result(self) -> Tuple[bytes, List[str]]:
        """Its output, and its warnings ("line N: ...")."""
        _, err = self.proc.communicate(timeout=600)
        assert self.proc.returncode == 0, err.decode()
        prefix = "seq2onnx translate: warning: "
        lines = err.decode().splitlines()
        assert all(line.startswith(prefix) for line in lines), lines
        return self.output.read_bytes(), [line[len(prefix):] for line in lines]


ODD = [                                      # lines that test reading and writing as the command does them
    b"\xef\xbb\xbfseven",                    # a BOM opening the file
    b"twenty three\r",                       # CRLF
    b"",                                     # blank
    b"   \t ",                               # whitespace only
    b"four\xff\xfe hundred",                 # invalid UTF-8
    b"nine \xf0\x9f\x98\x80 nine",           # a character the tokenizer never saw
    b" ".join([b"one"] * 700),               # past max_positions (512): truncated
    b"one\x0bhundred\x85two",                # characters str.splitlines() breaks at: one line here
]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Iterator[Dict[str, object]]:
    """The bulk input (LINES numbers and the ODD lines), and the command's output for it, begun here: the cluster
    starts meanwhile, mostly waiting."""
    tmp = tmp_path_factory.mktemp("ray")
    numbers = _numbers(LINES, seed=1)
    lines = [n.encode() for n in numbers]
    odd_at = [0] + [1 + i * (LINES // len(ODD)) for i in range(1, len(ODD))]      # ascending: final positions
    for at, odd in zip(odd_at, ODD):
        lines.insert(at, odd)
    bulk = tmp / "numbers.txt"
    bulk.write_bytes(b"\n".join(lines))      # no line break after the last line
    # one onnxruntime thread, as each actor has: beside the cluster, a second one would only spin on a busy core
    reference = Reference(bulk, *GREEDY, "--intra-threads", "1")
    yield {"tmp": tmp, "bulk": bulk, "numbers": numbers, "odd_at": odd_at, "reference": reference}
    if reference.proc.poll() is None:
        reference.proc.kill()


@pytest.fixture(scope="module")
def cluster(files) -> Iterator[LocalCluster]:
    """Two nodes of one CPU each: the head, and a worker with a resource of its own."""
    c = LocalCluster(cpus=1, workers=[{"second": 1}], object_store_mib=150)
    yield c
    c.stop()
    assert not c.processes(), "the cluster's processes outlived it"


class Job:
    """`seq2onnx translate-dataset` on the cluster, in the background; the actors seen while it ran."""

    def __init__(self, cluster: LocalCluster, *args: str):
        self.cluster = cluster
        self.others = set(cluster.named(MAP_WORKER))      # an earlier job's actors, still going away
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([*CLI, "translate-dataset", MODEL, *args, "--ray-address", cluster.address],
                                     env=RAY_ENV, stdout=self.log, stderr=subprocess.STDOUT)
        self.actors: Dict[int, int] = {}     # pid -> node (its raylet's pid)

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def watch(self) -> Dict[int, int]:
        """The job's actors now (pid -> node), each added to those seen."""
        now = {pid: node for pid, node in self.cluster.named(MAP_WORKER).items() if pid not in self.others}
        self.actors.update(now)
        return now

    def wait(self, timeout: float = 300) -> str:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, "the job did not end"
            self.watch()
            time.sleep(0.2)
        self.log.seek(0)
        output = self.log.read().decode(errors="replace")
        assert self.proc.returncode == 0, output[-3000:]
        assert "Traceback" not in output, output[-3000:]
        return output


# --- bulk ------------------------------------------------------------------------------------------------------
def test_bulk_job_writes_the_commands_output(cluster, files):
    tmp: Path = files["tmp"]
    out = tmp / "numbers.de"
    with Job(cluster, str(files["bulk"]), str(out), *GREEDY, "--actors", "2") as job:
        log = job.wait()
    want, warnings = files["reference"].result()
    got = out.read_bytes()
    assert got.count(b"\n") == LINES + len(ODD)
    assert got == want                               # byte for byte, line for line
    recorded = [json.loads(line) for line in (tmp / "numbers.de.errors.jsonl").read_text().splitlines()]
    assert [f"line {r['line']}: {r['warning']}" for r in recorded] == warnings
    assert len(warnings) >= 4                        # invalid UTF-8, <unk>, truncated (its byte bound too)
    assert f"{LINES + len(ODD)} rows; 0 failed" in log
    assert len(set(job.actors.values())) == 2        # one actor on each node


# --- fault -----------------------------------------------------------------------------------------------------
BAD = [("not json {", "not a JSON object"), ('["a list"]', "not a JSON object: a list"),
       ('{"id": "no-text"}', "no 'text' field"), ('{"id": "null", "text": null}', "is null, not a string"),
       ('{"id": "int", "text": 7}', "is int, not a string")]


def test_an_actor_killed_mid_job_loses_and_repeats_nothing(cluster, files):
    tmp: Path = files["tmp"]
    texts: List[str] = files["numbers"][:FAULT_LINES]
    lines = [json.dumps({"id": f"n{i}", "text": t, "other": i}) for i, t in enumerate(texts)]
    at = {FAULT_LINES // 5 * (k + 1): bad for k, bad in enumerate(BAD)}        # line numbers (1-based) after insertion
    for line in sorted(at):
        lines.insert(line - 1, at[line][0])
    source = tmp / "fault.jsonl"
    source.write_text("\n".join(lines) + "\n")
    out = tmp / "fault.parquet"
    with Job(cluster, str(source), str(out), *GREEDY, "--actors", "2", "--batch-size", "128", "--id-column",
             "id") as job:
        killed = _kill_an_actor_mid_job(job, tmp)
        job.wait()
    assert set(job.actors) - set(killed), "no actor was started again after the kill"
    table = pq.read_table(out)
    rows = table.to_pylist()
    assert table.column_names == ["id", "translation", "error", "warnings"]
    assert len(rows) == len(lines)                   # every row once
    odd_at = set(files["odd_at"])                    # the command's translations of the numbers alone
    want = [t.decode() for i, t in enumerate(files["reference"].result()[0].split(b"\n")) if i not in odd_at]
    want = want[:FAULT_LINES]
    good = [r for r in rows if r["error"] is None]
    assert [r["id"] for r in good] == [f"n{i}" for i in range(FAULT_LINES)]      # in order, none twice
    assert [r["translation"] for r in good] == want
    bad = {i: r for i, r in enumerate(rows, 1) if r["error"] is not None}
    assert sorted(bad) == sorted(at)
    for line, (_, message) in at.items():
        assert message in bad[line]["error"] and bad[line]["translation"] == ""


def _kill_an_actor_mid_job(job: Job, tmp: Path) -> Dict[int, int]:
    """SIGKILL one of the job's actors once its first rows are written (the output's temporary file has grown) and
    the job is not done; the actors it had then. Whichever actor is seen first: waiting to see both could outlast a
    job on a busy machine."""
    deadline = time.monotonic() + 240
    written: List[int] = []
    while True:
        assert job.proc.poll() is None, f"the job ended before an actor could be killed: {job.actors}, {written}"
        assert time.monotonic() < deadline, "the job wrote nothing"
        alive = job.watch()
        written = [f.stat().st_size for f in tmp.glob(".tmp-*fault.parquet")]
        if alive and written and written[0] > 4:                      # more than Parquet's magic bytes
            break
        time.sleep(0.1)
    os.kill(next(iter(alive)), signal.SIGKILL)
    return dict(job.actors)


# --- Ray Serve -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def translator() -> Translator:
    # one onnxruntime thread, as each replica has (ray-serve gives a replica of 1 CPU one thread): the answers compared
    # come from the same kernels and the same split of the work, on any CPU
    return Translator(MODEL, intra_threads=1)


def test_ray_serve_two_replicas(cluster, translator, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "ray-serve.log", "w+")
    proc = subprocess.Popen([*CLI, "ray-serve", MODEL, "--replicas", "2", "--port", str(port), "--ray-address",
                             cluster.address, "--log-level", "warning"], env=RAY_ENV, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        _wait_ready(url, proc, log)
        # the proxy answers /ready once one replica serves; the other may still be starting
        _wait(lambda: len(cluster.named(REPLICA)) == 2, "both replicas to start", 120)
        replicas = cluster.named(REPLICA)
        assert len(replicas) == 2 and len(set(replicas.values())) == 2           # one on each node
        lt = LibreTranslateAPI(url)
        assert lt.translate("twenty three", "en", "de") == translator.translate("twenty three")
        texts = ["seven", "one hundred and five", "four hundred and twelve"]
        for options in ({}, {"beam_size": 1, "return_scores": True}, {"beam_size": 3, "num_hypotheses": 2}):
            for _ in range(3):                       # a few rounds: the proxy spreads them over the replicas
                r = httpx.post(url + "/v1/translate", json={"texts": texts, **options}, timeout=60)
                assert r.status_code == 200, r.text
                want = [translator.translate_batch([t], **options)[0] for t in texts]       # sequentially
                got = r.json()["results"]
                assert [g["hypotheses"] for g in got] == [w.hypotheses for w in want]
                assert [g["token_ids"] for g in got] == [w.token_ids for w in want]
        r = httpx.post(url + "/translate", json={"q": ["seven", "eight"], "source": "en", "target": "de",
                                                 "alternatives": 2}, timeout=60)
        beam = [translator.translate_batch([t], beam_size=4, num_hypotheses=3)[0] for t in ("seven", "eight")]
        assert r.json() == {"translatedText": [b.hypotheses[0] for b in beam],
                            "alternatives": [[h for h in b.hypotheses[1:] if h != b.hypotheses[0]] for b in beam]}
        bad = httpx.post(url + "/v1/translate", json={"texts": ["seven"], "beam_size": 0}, timeout=60)
        assert bad.status_code == 400 and list(bad.json()) == ["error"] and "\n" not in bad.text
        _kill_a_replica_under_load(cluster, url, translator)
        proc.send_signal(signal.SIGTERM)             # the application is deleted: its replicas drain and stop
        assert proc.wait(60) == 0, _read(log)
        _wait(lambda: not cluster.named(REPLICA), "the replicas to stop")
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()


def _kill_a_replica_under_load(cluster: LocalCluster, url: str, translator: Translator) -> None:
    """SIGKILL one replica while four clients send requests, each client retrying a request that fails with a 5xx,
    the proxy's route-table 404 or a broken connection, as Serve's fault-tolerance guide advises (a translation is idempotent): every request
    gets its sequential answer, and Serve's controller starts a new replica in the dead one's place, which then
    answers too."""
    from concurrent.futures import ThreadPoolExecutor

    before = cluster.named(REPLICA)
    texts = _numbers(120, seed=3)
    want = {t: translator.translate_batch([t], beam_size=1)[0].hypotheses[0] for t in set(texts)}
    failed: List[int] = []                       # the status (0: no answer) of each try that failed

    def ask(text: str) -> str:
        for _ in range(20):
            try:
                r = httpx.post(url + "/v1/translate", json={"texts": [text], "beam_size": 1}, timeout=60)
            except httpx.TransportError:
                failed.append(0)
            else:
                if r.status_code == 200:
                    return r.json()["results"][0]["hypotheses"][0]
                # a 5xx, or the proxy's own 404 while its route table is refreshed during the failover (seen once
                # under load: "Path '/v1/translate' not found. Ping http://.../-/routes"); never the app's answer
                assert r.status_code >= 500 or (r.status_code == 404 and "/-/routes" in r.text), r.text
                failed.append(r.status_code)
            time.sleep(0.2)
        raise AssertionError(f"no answer for {text!r} in 20 tries: {failed}")

    with ThreadPoolExecutor(4) as pool:
        answers = [pool.submit(ask, t) for t in texts]
        _wait(lambda: sum(a.done() for a in answers) >= 20, "the first answers", 60)
        victim = next(iter(before))
        os.kill(victim, signal.SIGKILL)
        got = [a.result(timeout=300) for a in answers]
    assert got == [want[t] for t in texts], failed          # nothing lost, every answer the sequential one
    _wait(lambda: len(cluster.named(REPLICA)) == 2 and victim not in cluster.named(REPLICA),
          "Serve to start a replica in place of the killed one", 120)
    new = set(cluster.named(REPLICA)) - set(before)
    assert new, "no new replica"
    for text in texts[:20]:                     # both replicas answer again: the proxy spreads these over them
        assert ask(text) == want[text]


def _wait_ready(url: str, proc: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"seq2onnx ray-serve exited {proc.returncode}: {_read(log)}"
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the Serve application did not get ready: {_read(log)}")


def _wait(condition, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _read(log) -> str:
    log.seek(0)
    return log.read()[-3000:]


# --- without a cluster: the command's one-line errors --------------------------------------------------------
REFUSE = """
import contextlib, io, json, sys
from seq2onnx.runtime.cli.main import main
said = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        said.append([main(argv), err.getvalue()])
print(json.dumps({"said": said, "ray": sorted(m for m in sys.modules if m.split(".")[0] == "ray")}))
"""


def test_translate_dataset_refuses_bad_arguments_before_ray(tmp_path):
    """A bad option, MODEL, INPUT or OUTPUT (an OUTPUT or --errors that is INPUT, by any path or link, would replace
    it) is one line, exit 2, before Ray is imported, so before any cluster starts (a refusal takes the seconds
    Python takes to start, not the cluster's): all of them in one process, which imports no module of Ray."""
    (tmp_path / "in.txt").write_text("one\n")
    (tmp_path / "in.jsonl").write_text('{"text": "one"}\n')
    (tmp_path / "link.txt").symlink_to(tmp_path / "in.txt")
    os.link(tmp_path / "in.txt", tmp_path / "hard.txt")
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "fifo")
    cases = [
        (["in.txt", "out.txt", "--output", "x"], "--output is not an option of a dataset job"),
        (["in.txt", "out.txt", "--plot-attention", "d"], "--plot-attention is not an option of a dataset job"),
        (["in.txt", "out.txt", "--beam-size", "0"], "--beam-size"),
        (["in.txt", "out.txt", "--id-column", "id"], "--id-column names a JSONL or Parquet field"),
        (["in.jsonl", "out.parquet", "--errors", "e"], "--errors is for a text OUTPUT"),
        (["missing.txt", "out.txt"], "INPUT missing.txt: no such file"),
        (["fifo", "out.txt"], "INPUT fifo is not a file or a folder of files"),
        (["in.txt", "in.txt"], "OUTPUT in.txt is the input file (INPUT in.txt)"),
        (["in.txt", "./in.txt"], "OUTPUT ./in.txt is the input file (INPUT in.txt)"),
        (["in.txt", "link.txt"], "OUTPUT link.txt is the input file (INPUT in.txt)"),
        (["link.txt", "hard.txt"], "OUTPUT hard.txt is the input file (INPUT link.txt)"),
        (["in.txt", "out.txt", "--errors", "hard.txt"], "--errors hard.txt is the input file (INPUT in.txt)"),
        (["in.txt", "out.txt", "--errors", "./out.txt"], "--errors ./out.txt is OUTPUT"),
        (["in.txt", "folder"], "OUTPUT folder is a folder"),
        (["in.txt", "nowhere/out.txt"], "OUTPUT nowhere/out.txt: the folder"),
        (["in.txt", "out.txt", "--no-such-flag", "x"], "unrecognized arguments"),
    ]
    argv = [["translate-dataset", MODEL, *args] for args, _ in cases]
    argv.append(["translate-dataset", "no-model", "in.txt", "out.txt"])          # after INPUT's and OUTPUT's checks
    done = subprocess.run([sys.executable, "-c", REFUSE, json.dumps(argv)], cwd=tmp_path, env=RAY_ENV,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for (args, message), (rc, err) in zip(cases + [(argv[-1], "no-model does not exist")], report["said"]):
        assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, (args, err)
    assert report["ray"] == []                       # no cluster could have started
    assert (tmp_path / "in.txt").read_text() == "one\n"
    assert sorted(os.listdir(tmp_path)) == ["fifo", "folder", "hard.txt", "in.jsonl", "in.txt", "link.txt"]


def test_an_actor_translates_with_the_options_records_and_a_bad_one_fails_each_row():
    """dataset.Translate (an actor's callable, here in this process: no cluster) makes the records of its options
    once: its rows come out as `seq2onnx translate`'s with those flags; an option that only the model can refuse
    (translate_dataset does not load the model to check it) is each row's error, one line naming the flag, and the
    job's other columns are a failed row's."""
    import pyarrow as pa

    from seq2onnx.runtime.ray.dataset import Translate
    from seq2onnx.runtime.ray.job import parse_options

    rows = pa.table({"text": ["three hundred and one", "seven"], "line": [1, 2]})
    args, decoding = parse_options(MODEL, ["--beam-size", "2", "--n-best", "2", "--scores"])
    got = Translate(args, decoding, output=True)(rows)
    want = subprocess.run([*CLI, "translate", MODEL, "--beam-size", "2", "--n-best", "2", "--scores"],
                          input=b"three hundred and one\nseven\n", capture_output=True, timeout=120, check=True)
    assert b"".join(got.column("output").to_pylist()) == want.stdout
    assert got.column("error").to_pylist() == [None, None]
    args, decoding = parse_options(MODEL, ["--target-lang", "fra"])
    got = Translate(args, decoding, output=True)(rows)
    errors = got.column("error").to_pylist()
    assert errors == ["--target-lang 'fra' is not a target language of this model; it has de (seq2onnx info MODEL "
                      "lists them)"] * 2
    assert got.column("translation").to_pylist() == ["", ""]
