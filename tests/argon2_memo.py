"""Argon2 computed once per password in a test process, instead of twice in nearly every test.

Signing a merchant up hashes its password and logging in verifies it: two argon2id computations, slow
on purpose (about 0.04 s of CPU each; with the earlier 64 MiB parameters, 0.14 s of CPU and
more wall time), in every test that needs a merchant: on a 2-core machine they were a third of the
suite's CPU. `install()` wraps argon2-cffi's two primitives, which passlib (and so
payorch) calls, so that:

- hashing a password already hashed with the same parameters gives the hash computed the first time
  (a real argon2id hash of that password; only its salt repeats);
- verifying a (hash, password) pair already seen, or one the hashing produced, gives the result argon2
  gave (or would give: a hash always verifies against its own password); any other pair is computed.

Every hash and every result is what argon2 computes, so what payorch stores and which logins it accepts
are unchanged; only time is saved, and salts repeat. Nothing in a test may depend on a login taking
argon2's time or on two accounts' salts differing. Processes the tests start (`payorch serve`) hash for
real.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import argon2.exceptions
import argon2.low_level

_lock = threading.Lock()
_hashes: dict[tuple[Any, ...], bytes] = {}
_verified: dict[tuple[bytes, bytes, Any], BaseException | None] = {}


def _as_bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value


def _memo_hash(real: Callable[..., bytes]) -> Callable[..., bytes]:
    def hash_secret(
        secret: bytes,
        salt: bytes,
        time_cost: int,
        memory_cost: int,
        parallelism: int,
        hash_len: int,
        type: Any,  # argon2-cffi's parameter names: passlib passes them by keyword
        version: int = argon2.low_level.ARGON2_VERSION,
    ) -> bytes:
        key = (_as_bytes(secret), time_cost, memory_cost, parallelism, hash_len, type, version)
        with _lock:
            found = _hashes.get(key)
        if found is None:
            found = real(
                secret=secret,
                salt=salt,
                time_cost=time_cost,
                memory_cost=memory_cost,
                parallelism=parallelism,
                hash_len=hash_len,
                type=type,
                version=version,
            )
            with _lock:
                found = _hashes.setdefault(key, found)
                _verified[(found, key[0], type)] = None
        return found

    return hash_secret


def _memo_verify(real: Callable[..., bool]) -> Callable[..., bool]:
    def verify_secret(hash: bytes, secret: bytes, type: Any) -> bool:
        key = (_as_bytes(hash), _as_bytes(secret), type)
        with _lock:
            known = key in _verified
            failure = _verified.get(key)
        if not known:
            try:
                real(hash, secret, type)
                failure = None
            except argon2.exceptions.VerificationError as error:  # a mismatch, or a malformed hash
                failure = error
            with _lock:
                _verified[key] = failure
        if failure is not None:
            raise failure.__class__(*failure.args)
        return True

    return verify_secret


def install() -> None:
    """Wrap argon2-cffi's hash_secret and verify_secret in this process (once)."""
    low_level: Any = argon2.low_level
    if getattr(low_level.hash_secret, "memoized", False):
        return
    hash_secret = _memo_hash(low_level.hash_secret)
    verify_secret = _memo_verify(low_level.verify_secret)
    hash_secret.memoized = True  # type: ignore[attr-defined]
    low_level.hash_secret = hash_secret
    low_level.verify_secret = verify_secret
