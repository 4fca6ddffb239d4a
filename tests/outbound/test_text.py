"""What a receiver sends is stored as valid text: no NUL, no invalid UTF-8, no lone surrogates; and its
headers within bounds, however many and however long."""

from __future__ import annotations

from payorch.outbound.text import (
    HEADER_NAME_LENGTH,
    HEADER_VALUE_LENGTH,
    HEADERS_TOTAL,
    MAX_HEADERS,
    storable_excerpt,
    storable_headers,
    storable_text,
)


def test_nul_bytes_become_replacement_characters() -> None:
    assert storable_excerpt(b"ok\x00bye") == "ok\ufffdbye"


def test_invalid_utf8_is_replaced_not_refused() -> None:
    text = storable_excerpt(b"\xff\xfe bad \xed\xa0\x80 end")  # \xed\xa0\x80 would be a surrogate
    assert text.startswith("\ufffd\ufffd bad ") and text.endswith(" end")
    text.encode("utf-8")  # valid: encodes without surrogatepass


def test_a_character_cut_in_two_at_the_end_of_the_excerpt_is_left_out() -> None:
    assert storable_excerpt("abc€".encode()[:-1]) == "abc"


def test_error_text_loses_nul_and_lone_surrogates_and_is_cut_to_its_limit() -> None:
    assert storable_text("a\x00b\ud800c") == "a\ufffdb\ufffdc"
    assert storable_text("x" * 600, 500) == "x" * 500


def test_headers_are_kept_in_order_with_repeats_names_lowercased_and_made_fit_to_store() -> None:
    raw = [(b"X-Trace", b"a\x00b"), (b"Set-Cookie", b"one"), (b"set-cookie", b"two"), (b"X-Name", b"caf\xe9")]
    assert storable_headers(raw) == (
        ("x-trace", "a\ufffdb"),
        ("set-cookie", "one"),
        ("set-cookie", "two"),
        ("x-name", "café"),
    )


def test_headers_beyond_the_count_are_left_out_and_long_ones_cut() -> None:
    many = [(f"h{index}".encode(), b"v") for index in range(MAX_HEADERS + 10)]
    assert len(storable_headers(many)) == MAX_HEADERS
    ((name, value),) = storable_headers([(b"n" * 500, b"v" * 5000)])
    assert (len(name), len(value)) == (HEADER_NAME_LENGTH, HEADER_VALUE_LENGTH)


def test_headers_stop_before_the_total_is_passed() -> None:
    # Each pair is 100 + 1000 characters once cut: seven fit in 8192, the eighth would not.
    big = [(b"n" * 200, b"v" * 2000)] * 20
    kept = storable_headers(big)
    assert len(kept) == HEADERS_TOTAL // (HEADER_NAME_LENGTH + HEADER_VALUE_LENGTH)
    assert sum(len(name) + len(value) for name, value in kept) <= HEADERS_TOTAL
