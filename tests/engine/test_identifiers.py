"""Identifiers in canonical form: spellings a reader cannot tell apart are one identifier."""

from __future__ import annotations

import pytest

from payorch.engine.accounts.identifiers import canonical_identifier


@pytest.mark.parametrize("invisible", ["\u200b", "\u200c", "\u200d", "\ufeff", "\u2060", "\u00ad", "\u202e"])
def test_format_characters_are_removed(invisible: str) -> None:
    assert canonical_identifier(f"REG{invisible}-1") == "REG-1"


def test_full_width_letters_and_digits_are_their_ascii_forms() -> None:
    assert canonical_identifier("\uff32\uff25\uff27\uff0d\uff11") == "REG-1"


def test_decomposed_accent_is_composed() -> None:
    assert canonical_identifier("Zu\u0308rich") == canonical_identifier("Z\u00fcrich") == "Z\u00fcrich"


def test_accent_separated_by_a_joiner_is_composed() -> None:
    assert canonical_identifier("e\u200d\u0301") == "\u00e9"


def test_surrounding_white_space_and_invisible_characters_are_removed() -> None:
    assert canonical_identifier(" \u200b REG-1\u00a0\ufeff") == "REG-1"


def test_no_break_space_inside_is_a_space() -> None:
    assert canonical_identifier("REG\u00a01") == "REG 1"


def test_letter_case_is_kept() -> None:
    assert canonical_identifier("Owner@Acme.example") == "Owner@Acme.example"


def test_only_invisible_characters_is_empty() -> None:
    assert canonical_identifier("\u200b\ufeff") == ""


@pytest.mark.parametrize("text", ["REG-1", "\uff32\u200b\uff25", " e\u200d\u0301 ", "\ufb01le", "\u2126"])
def test_canonical_form_is_stable(text: str) -> None:
    once = canonical_identifier(text)
    assert canonical_identifier(once) == once
