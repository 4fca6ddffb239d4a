"""A sealed value opens to what was sealed, however often and from whichever thread, and only with
the box's own keys: one kept opened is not opened by a box without its key."""

from __future__ import annotations

import threading

import pytest
from cryptography.fernet import Fernet

from payorch.values.secretbox import OPENED_KEPT, SecretBox, UnreadableSecret

KEY, OTHER_KEY = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def test_a_value_opened_again_is_what_was_sealed() -> None:
    box = SecretBox(KEY)
    sealed = box.seal("sk_test_one")
    assert [box.open(sealed) for _ in range(3)] == ["sk_test_one"] * 3
    assert box.open(bytearray(sealed)) == "sk_test_one"  # as the database hands bytea back


def test_a_value_opened_by_one_box_does_not_open_in_a_box_without_its_key() -> None:
    sealed = SecretBox(KEY).seal("whsec_one")
    assert SecretBox([OTHER_KEY, KEY]).open(sealed) == "whsec_one"
    with pytest.raises(UnreadableSecret):
        SecretBox(OTHER_KEY).open(sealed)


def test_a_value_no_key_opens_fails_every_time_it_is_opened() -> None:
    box = SecretBox(KEY)
    foreign = SecretBox(OTHER_KEY).seal("sk_test_foreign")
    for _ in range(2):
        with pytest.raises(UnreadableSecret):
            box.open(foreign)


def test_more_values_than_are_kept_each_open_to_their_own() -> None:
    box = SecretBox(KEY)
    sealed = {f"sk_test_{n}": box.seal(f"sk_test_{n}") for n in range(OPENED_KEPT + 10)}
    for _ in range(2):
        assert all(box.open(value) == plain for plain, value in sealed.items())


def test_values_opened_from_several_threads_at_once_are_each_their_own() -> None:
    box = SecretBox(KEY)
    sealed = [(f"whsec_{n}", box.seal(f"whsec_{n}")) for n in range(200)]
    wrong: list[str] = []

    def open_all() -> None:
        for _ in range(5):
            wrong.extend(plain for plain, value in sealed if box.open(value) != plain)

    threads = [threading.Thread(target=open_all) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
