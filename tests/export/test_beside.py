"""export/beside.py: work in a forked child beside this process's own, its failures raised here."""
import os
from pathlib import Path

import pytest

from seq2onnx.export import beside as B


class Refused(ValueError):
    pass


class Unpicklable(Exception):
    def __init__(self, a, b):                 # pickles as Unpicklable(a_and_b_message) and fails to rebuild
        super().__init__(f"{a} {b}")


def _write(path: Path, text: str):
    def work() -> None:
        path.write_text(f"{text} {os.getpid()}")
    return work


def test_work_runs_beside_the_block_and_its_files_are_there_after(tmp_path):
    out = tmp_path / "child.txt"
    with B.beside(_write(out, "child"), "a test"):
        (tmp_path / "parent.txt").write_text("parent")
    assert out.read_text().startswith("child ")
    if B.can_fork():                                     # the work ran in another process
        assert out.read_text() != f"child {os.getpid()}"


def test_the_works_exception_is_raised_here_with_its_type_and_message():
    def work() -> None:
        raise Refused("the encoder could not be traced: a reason")
    with pytest.raises(Refused, match="the encoder could not be traced: a reason"):
        with B.beside(work, "a test"):
            pass


def test_an_exception_that_does_not_unpickle_becomes_one_line_naming_the_work():
    def work() -> None:
        raise Unpicklable("first", "second")
    with pytest.raises(RuntimeError, match="^Unpicklable: first second$"):
        with B.beside(work, "the encoder's trace"):
            pass


@pytest.mark.skipif(not B.can_fork(), reason="no second core or no fork: the work runs inline")
def test_a_child_that_dies_is_an_error_naming_the_work_not_a_hang():
    def work() -> None:
        os._exit(3)
    with pytest.raises(RuntimeError, match=r"the encoder's trace: its process ended without a result \(exit code 3"):
        with B.beside(work, "the encoder's trace"):
            pass


@pytest.mark.skipif(not B.can_fork(), reason="no second core or no fork: the work runs inline")
def test_the_blocks_own_error_stops_the_child(tmp_path):
    marker = tmp_path / "late.txt"

    def work() -> None:
        import time
        time.sleep(30)
        marker.write_text("too late")
    with pytest.raises(KeyError):
        with B.beside(work, "a test"):
            raise KeyError("the block failed")
    assert not marker.exists()
