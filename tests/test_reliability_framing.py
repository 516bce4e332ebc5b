"""LSP framing: corrupt frames are skipped and the stream resynchronises on the next header."""

from __future__ import annotations

import json
import random

import pytest

from memosight_lsp.server.protocol import FrameReader, could_begin_header, parse_headers


def frame(body: bytes, length: int | None = None, extra: bytes = b"") -> bytes:
    n = len(body) if length is None else length
    return b"Content-Length: %d\r\n" % n + extra + b"\r\n" + body


def message(i: int) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": i, "method": "memosight/stats", "params": {}}
    ).encode()


def bodies(reader: FrameReader, data: bytes, chunk: int | None = None) -> list[bytes]:
    out: list[bytes] = []
    step = chunk or len(data) or 1
    for i in range(0, len(data), step):
        out += [f.body for f in reader.feed(data[i : i + step]) if f.body is not None]
    return out


def test_well_formed_frames_come_out_whole_however_the_bytes_are_split():
    stream = b"".join(frame(message(i)) for i in range(5))
    for chunk in (1, 2, 7, 64, None):
        assert bodies(FrameReader(), stream, chunk) == [message(i) for i in range(5)]


def test_a_short_body_does_not_swallow_the_next_frame():
    # The case: Content-Length 5, then 3 bytes, then a good request.
    stream = b"Content-Length: 5\r\n\r\nabc" + frame(message(1))
    reader = FrameReader()
    frames = reader.feed(stream)
    assert [f.body for f in frames if f.body is not None] == [message(1)]
    assert "next header began after 3" in (frames[0].problem or "")
    assert reader.pending == 0


def test_a_short_body_is_detected_even_when_its_bytes_arrive_one_by_one():
    stream = b'Content-Length: 500\r\n\r\n{"jsonrpc"' + frame(message(2))
    assert bodies(FrameReader(), stream, 1) == [message(2)]


def test_a_complete_message_under_a_too_large_length_is_still_handled():
    # A client that counted its bytes wrong: the JSON object before the next header is whole.
    stream = frame(message(1), length=len(message(1)) + 40) + frame(message(2))
    frames = FrameReader().feed(stream)
    assert [f.body for f in frames if f.body is not None] == [message(1), message(2)]
    assert "handled" in (frames[0].problem or "")


def test_a_body_longer_than_its_length_costs_only_that_frame():
    body = message(1)
    stream = frame(body, length=len(body) - 10) + frame(message(2))
    out = bodies(FrameReader(), stream)
    assert out[-1] == message(2)
    assert body not in out


@pytest.mark.parametrize(
    "corrupt",
    [
        b"Content-Length: abc\r\n\r\n{}",
        b"Content-Length: -5\r\n\r\n{}",
        b"Content-Length: 99999999999999\r\n\r\n{}",  # over the limit: a lie
        b"Content-Type: x\r\n\r\n{}",  # no Content-Length
        b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"X-Huge: " + b"h" * 20_000 + b"\r\n\r\n",
        b"garbage without any header",
        b"\xff\xfe\x00\x01binary\r\n\r\n\x00",
        b"Content-Length 5\r\n\r\nhello",
    ],
)
def test_corrupt_headers_are_skipped_up_to_the_next_header(corrupt):
    reader = FrameReader()
    out = bodies(reader, corrupt + frame(message(7)))
    assert out[-1] == message(7)
    assert reader.problems >= 1


def test_headers_are_case_insensitive_and_content_type_is_allowed():
    body = message(3)
    stream = b"content-length:%d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n"
    assert bodies(FrameReader(), stream % len(body) + body) == [body]


def test_a_header_text_inside_a_json_string_is_no_header():
    # JSON escapes line breaks, so a document holding HTTP text cannot fake a header.
    text = "Content-Length: 5\r\n\r\nabc" * 3
    body = json.dumps({"jsonrpc": "2.0", "method": "x", "params": {"text": text}}).encode()
    assert bodies(FrameReader(), frame(body) + frame(message(1)), 3) == [body, message(1)]


def test_a_corrupt_body_ending_where_a_header_may_begin_waits_for_the_rest():
    reader = FrameReader()
    assert reader.feed(b"Content-Length: 5\r\n\r\nabcCo") == []  # "Co" may start a header
    rest = frame(message(4))[2:]
    assert [f.body for f in reader.feed(rest) if f.body is not None] == [message(4)]


def test_empty_and_zero_length_frames():
    reader = FrameReader()
    frames = reader.feed(b"Content-Length: 0\r\n\r\n" + frame(message(5)))
    assert [f.body for f in frames] == [b"", message(5)]  # the empty body: a parse error later


def test_header_helpers():
    assert parse_headers(b"Content-Length: 12") == (12, None)
    assert parse_headers(b"Content-Length: 12\r\nContent-Type: a")[0] == 12
    assert parse_headers(b"Content-Length: 1x")[0] is None
    assert could_begin_header(b"Cont")
    assert could_begin_header(b"content-length: 12\r")
    assert not could_begin_header(b"Contents")
    assert not could_begin_header(b"c}")


def corrupt_frame(rng: random.Random) -> bytes:
    junk = bytes(rng.choice(b'abc{}[]":, 0123\r\n\xff') for _ in range(rng.randint(0, 40)))
    kind = rng.randrange(6)
    if kind == 0:  # short body
        return b"Content-Length: %d\r\n\r\n" % (len(junk) + rng.randint(1, 10_000)) + junk
    if kind == 1:  # long body
        return b"Content-Length: %d\r\n\r\n" % max(0, len(junk) - 5) + junk + b"tail"
    if kind == 2:  # bad length
        return b"Content-Length: " + rng.choice([b"x", b"-1", b"", b"1e3"]) + b"\r\n\r\n" + junk
    if kind == 3:  # bytes between frames
        return junk
    if kind == 4:  # huge header
        return b"X-Pad: " + b"p" * rng.randint(9_000, 30_000) + b"\r\n\r\n" + junk
    return b"Content-Length: 10000000000000\r\n\r\n" + junk


@pytest.mark.parametrize("seed", range(20))
def test_every_good_frame_after_any_corrupt_one_comes_through(seed):
    rng = random.Random(seed)
    good: list[bytes] = []
    stream = b""
    for i in range(60):
        if rng.random() < 0.5:
            stream += corrupt_frame(rng)
        body = message(i)
        good.append(body)
        stream += frame(body)
    reader = FrameReader()
    out = bodies(reader, stream, rng.choice([1, 5, 100, None]))
    assert [b for b in out if b in good] == good
