"""The toolkit's frames (:mod:`turngym.sandbox.inside.framing`): sizes, EOF mid-frame, deadlines."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from turngym.sandbox.inside import framing


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_a_frame_round_trips_and_frames_in_a_row_stay_apart(pair):
    a, b = pair
    framing.send_frame(a, b"hello", 10)
    framing.send_frame(a, b"", 10)
    assert framing.recv_frame(b, 10) == b"hello"
    assert framing.recv_frame(b, 10, time.monotonic() + 5) == b""


def test_an_oversized_frame_is_refused_at_either_end(pair):
    a, b = pair
    with pytest.raises(ValueError, match="over the 4-byte limit"):
        framing.send_frame(a, b"12345", 4)
    a.sendall((1 << 30).to_bytes(4, "big") + b"x")  # a hostile length: refused before any body is read
    with pytest.raises(ValueError, match="over the 100-byte limit"):
        framing.recv_frame(b, 100)
    assert b.recv(10) == b"x"


def test_eof_before_or_in_the_middle_of_a_frame_is_eoferror(pair):
    a, b = pair
    a.sendall((10).to_bytes(4, "big") + b"abc")
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(EOFError):
        framing.recv_frame(b, 100)
    with pytest.raises(EOFError):
        framing.recv_exact(b, 1)


def test_the_deadline_holds_even_if_bytes_trickle_in(pair):
    a, b = pair
    stop = threading.Event()

    def trickle():
        while not stop.wait(0.05):
            try:
                a.sendall(b"\x00")
            except OSError:
                return

    threading.Thread(target=trickle, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        framing.recv_exact(b, 1000, t0 + 0.3)
    stop.set()
    assert time.monotonic() - t0 < 2.0
    with pytest.raises(TimeoutError):
        framing.recv_exact(b, 1, time.monotonic() - 1)  # already past: no read at all


def test_take_frame_reads_frames_out_of_a_buffer(pair):
    buf = bytearray(framing.pack_frame(b"one", 10) + framing.pack_frame(b"two", 10)[:5])
    assert framing.take_frame(buf, 10) == b"one"
    assert framing.take_frame(buf, 10) is None and len(buf) == 5
    buf += b"wo"
    assert framing.take_frame(buf, 10) == b"two" and not buf
    assert framing.take_frame(bytearray(b"\x00\x00"), 10) is None
    with pytest.raises(ValueError):
        framing.take_frame(bytearray((11).to_bytes(4, "big")), 10)  # refused before the body arrives


def test_write_all_writes_everything():
    import os

    r, w = os.pipe()
    data = b"x" * 200_000  # more than a pipe takes at once: os.write writes part of it
    got = bytearray()

    def drain():
        while chunk := os.read(r, 65536):
            got.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    framing.write_all(w, data)
    os.close(w)
    reader.join(5)
    os.close(r)
    assert bytes(got) == data


def test_flush_streams_survives_streams_the_code_under_test_broke(monkeypatch):
    class Broken:  # test double: a stdout replaced by hostile code
        def flush(self):
            raise SystemExit("no")

    flushed = []

    class Fine:
        def flush(self):
            flushed.append(True)

    monkeypatch.setattr("sys.stdout", Broken())
    monkeypatch.setattr("sys.stderr", Fine())
    framing.flush_streams()
    assert flushed == [True]
