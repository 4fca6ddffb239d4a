"""What a receiver sends is stored as valid text: no NUL, no invalid UTF-8, no lone surrogates."""

from __future__ import annotations

from payorch.outbound.text import storable_excerpt, storable_text


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
