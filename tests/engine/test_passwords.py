"""Passwords refused whatever their length: one character repeated, or nothing visible."""

from __future__ import annotations

import pytest

from payorch.engine.accounts.passwords import password_weakness


@pytest.mark.parametrize("password", ["a" * 16, "7" * 20, "\u00e9" * 16])
def test_one_repeated_character_is_weak(password: str) -> None:
    assert password_weakness(password) is not None


@pytest.mark.parametrize("password", [" " * 16, " \t" * 8, "\u3000" * 16, " \u200b" * 8, "\u00a0 " * 8])
def test_only_white_space_or_invisible_characters_is_weak(password: str) -> None:
    assert password_weakness(password) is not None


@pytest.mark.parametrize("password", ["correct-horse-battery", "aaaaaaaaaaaaaaab", " padded password "])
def test_password_with_more_than_one_visible_character_is_not_weak(password: str) -> None:
    assert password_weakness(password) is None
