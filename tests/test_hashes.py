"""The hashes a hook computes come from CPython's own modules: the same digests as
hashlib's, and a new process that writes a memory never loads OpenSSL for them."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from mnemex.text import content_hash, hash_function


@pytest.mark.parametrize("name", ["sha1", "sha256", "blake2b"])
@pytest.mark.parametrize("data", [b"", b"abc", "naïve 記憶 ".encode() * 999])
def test_each_hash_gives_hashlibs_digest(name: str, data: bytes) -> None:
    assert hash_function(name)(data).hexdigest() == getattr(hashlib, name)(data).hexdigest()


def test_a_blake2b_digest_of_a_given_size_is_hashlibs() -> None:
    ours = hash_function("blake2b")(b"vector", digest_size=16).hexdigest()
    assert ours == hashlib.blake2b(b"vector", digest_size=16).hexdigest()


def test_content_hash_is_the_sha256_of_the_utf8_text() -> None:
    assert content_hash("café") == hashlib.sha256("café".encode()).hexdigest()


def test_a_new_process_adds_a_memory_without_hashlib(tmp_path: Path) -> None:
    script = (
        "import sys, mnemex\n"
        f"with mnemex.open({str(tmp_path / 'h.db')!r}, embedder='none') as s:\n"
        "    s.add('the uploader retries seven times')\n"
        "print('_hashlib' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False"]
