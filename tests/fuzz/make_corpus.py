#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_stream, tests/fuzz/corpus/fuzz_stream/.

Each seed is one small program in the input format that fuzz_stream.c's
first comment describes; this file spells them out so that they can be
read and changed. Run it from anywhere: python3 tests/fuzz/make_corpus.py
"""
import os

# Index of each buffer size in fuzz_stream.c's caps[] (byte 0).
CAP = {1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 7: 5, 8: 6, 9: 7, 16: 8, 17: 9,
       31: 10, 64: 11, 100: 12, 256: 13, 1024: 14, 65536: 15}
HALF_CLOSE, READER_YIELDS, STREAM_WRITER = 1, 2, 4  # byte 1

# Chunk specs: size 1..32 (times 16 with X16), then the pause.
NONE, YIELD, DRAIN, YIELD4 = 0x00, 0x20, 0x40, 0x60
X16 = 0x80


def chunk(size, pause=NONE, x16=False):
    assert 1 <= size <= 32
    return (size - 1) | pause | (X16 if x16 else 0)


# Calls: kind byte, arg byte.
READLINE, READ, READ_EXACT = 0, 1, 2
DEADLINE, YIELD_FIRST = 4, 8
ARG, AROUND_CAP, TIMES16, TIMES256 = 0x00, 0x10, 0x20, 0x30


def call(kind, size, mode=ARG, flags=0):
    if mode == AROUND_CAP:  # size is the offset from the buffer size
        assert -128 <= size <= 127
        size &= 0xff
    assert 0 <= size <= 255
    return (kind | mode | flags, size)


def prog(cap, data, chunks=(), calls=(), flags=0):
    out = bytes([CAP[cap], flags, len(chunks)]) + bytes(chunks)
    out += bytes([len(calls)]) + b"".join(bytes(c) for c in calls)
    return out + data


def lines(n, size, **kw):
    return [call(READLINE, size, **kw)] * n


SEEDS = {
    "empty": b"",
    # Short lines, each write on its own.
    "short_lines": prog(64, b"a\nbb\nccc\n\nd\n", [chunk(1, DRAIN)],
                        lines(6, 32)),
    # Lines written together, read with max just above their length.
    "short_lines_batched": prog(16, b"ab\ncd\nef\ngh\n", [chunk(12)],
                                lines(5, 4)),
    # A line longer than the buffer, then one that fits.
    "long_line": prog(8, b"0123456789abcdef\nok\n", [chunk(3, YIELD)],
                      lines(3, 64)),
    # A line longer than max but not than the buffer.
    "long_line_small_max": prog(64, b"0123456789\nok\n",
                                [chunk(5, DRAIN)], lines(3, 6)),
    # The long line, then read_exact and readline (the bug: see KNOWN BUG
    # in fuzz_stream.c; only the strict mode keeps the read_exact).
    "long_line_then_read_exact": prog(
        4, b"AAAAAA\nBB\nCC\n", [chunk(13)],
        [call(READLINE, 64), call(READ_EXACT, 4), call(READLINE, 64),
         call(READLINE, 64)]),
    # CRLF lines, max at the buffer's size + 1.
    "crlf": prog(16, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", [chunk(7, YIELD)],
                 lines(4, 1, mode=AROUND_CAP)),
    # The last line without its '\n'.
    "no_trailing_newline": prog(16, b"one\ntwo\nthree", [chunk(2, DRAIN)],
                                lines(4, 32)),
    # An unterminated last line as long as the buffer (-EMSGSIZE), and
    # one a byte shorter.
    "unterminated_cap": prog(8, b"12345678", [chunk(3, DRAIN)], lines(2, 64)),
    "unterminated_cap_minus_1": prog(8, b"1234567", [chunk(3, DRAIN)],
                                     lines(2, 64)),
    # A terminated line exactly as long as the buffer, with max = cap + 1
    # (fits) and max = cap (does not).
    "line_of_cap": prog(8, b"1234567\n1234567\n", [chunk(16)],
                        [call(READLINE, 1, AROUND_CAP),
                         call(READLINE, 0, AROUND_CAP), call(READLINE, 9)]),
    # read_exact that fits in the buffer, past end of file.
    "read_exact_past_eof": prog(16, b"0123456789" * 2 + b"abcde",
                                [chunk(4, YIELD)],
                                [call(READ_EXACT, 10)] * 4),
    # read_exact larger than the buffer, then read.
    "read_exact_large": prog(4, b"abcdefghijklmnopqrst", [chunk(3, DRAIN)],
                             [call(READ_EXACT, 5, AROUND_CAP),
                              call(READ, 2), call(READ_EXACT, 100),
                              call(READ, 1)]),
    # Every call in turn on lines and bytes.
    "mixed": prog(7, b"hello\nworld, this is long\nab\ncd\nend",
                  [chunk(2, YIELD), chunk(5, DRAIN), chunk(1, YIELD4)],
                  [call(READ, 3), call(READLINE, 8), call(READ_EXACT, 5),
                   call(READLINE, 100), call(READ, 0, AROUND_CAP),
                   call(READLINE, 3), call(READ_EXACT, 2),
                   call(READLINE, 5)]),
    # Calls under a deadline that has passed, while the writer trickles.
    "deadline": prog(16, b"first line\nsecond\n0123456789ABCDEF",
                     [chunk(3, DRAIN)],
                     [call(READLINE, 32, flags=DEADLINE),
                      call(READLINE, 32, flags=DEADLINE | YIELD_FIRST),
                      call(READ_EXACT, 12, flags=DEADLINE),
                      call(READ_EXACT, 20, flags=DEADLINE),
                      call(READ, 4, flags=DEADLINE), call(READLINE, 32)]),
    # The writer half-closes and waits for the reader to close.
    "half_close": prog(5, b"ab\ncdefgh\nij\nk", [chunk(2, YIELD)],
                       lines(5, 8), flags=HALF_CLOSE),
    # The reader yields before every call.
    "reader_yields": prog(9, b"x\nyy\nzzz\n" * 3,
                          [chunk(1), chunk(4, YIELD), chunk(2, DRAIN)],
                          lines(4, 5) + [call(READ, 3)] * 3,
                          flags=READER_YIELDS),
    # The writer sends through a stream of its own: small writes batched
    # until a pause flushes them, and writes larger than its buffer.
    "stream_writer": prog(16, b"one\ntwo\nthree\nfour\n" * 2,
                          [chunk(3), chunk(2), chunk(4, DRAIN)],
                          lines(8, 32), flags=STREAM_WRITER),
    "stream_writer_large": prog(8, b"0123456789abcdefghij\nxyz\n",
                                [chunk(3), chunk(12, YIELD)],
                                [call(READ_EXACT, 4, AROUND_CAP),
                                 call(READLINE, 64), call(READLINE, 64)],
                                flags=STREAM_WRITER | HALF_CLOSE),
    # max 0 (-EINVAL), 1 (nothing fits), 2, and around the buffer size.
    "max_edges": prog(4, b"\n\na\nab\nabc\nabcd\n", [chunk(32)],
                      [call(READLINE, 0), call(READLINE, 1),
                       call(READLINE, 2), call(READLINE, 2),
                       call(READLINE, 0, AROUND_CAP),
                       call(READLINE, 1, AROUND_CAP),
                       call(READLINE, 2, AROUND_CAP), call(READ_EXACT, 0),
                       call(READ, 0)]),
    # The default buffer (64 KiB), large writes, a large max.
    "default_buffer": prog(65536, (b"%03d " % 7) * 100 + b"\ntail\n",
                           [chunk(8, YIELD, x16=True)],
                           [call(READLINE, 2, mode=TIMES256),
                            call(READ_EXACT, 1, mode=TIMES16),
                            call(READLINE, 1, mode=TIMES256)]),
    # A buffer of one byte: only "\n" fits.
    "cap_1": prog(1, b"\n\na\n\nbc", [chunk(1, YIELD)], lines(6, 16)),
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "corpus", "fuzz_stream")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):
        os.remove(os.path.join(out, name))
    for name, data in SEEDS.items():
        assert len(data) <= 512, name
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
