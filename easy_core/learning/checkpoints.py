"""What the SFT and GRPO stages share around their TRL trainer: a trainable copy of the base
model (top layers or LoRA), and the checkpoint written into place with its card, plus the
training curve and metrics."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from easy_core.core.params import PRIVILEGED_POLICIES, GrpoParams
from easy_core.core.storage import atomic_write_text, write_json
from easy_core.executors.hf_models import CONTRACT_FILE, drop_quantization, require_contract

WEIGHT_FILES = (
    "*.safetensors", "*.bin", "config.json", "tokenizer*", "chat_template*", CONTRACT_FILE
)  # fmt: skip


def checkpoint_digest(model: str | Path) -> str:
    """A hash of what makes a checkpoint folder behave as it does (weights, config, tokenizer,
    chat template; not its card or curve), so results can be reused while it is unchanged and
    are redone once it is retrained in place. A name that is not a folder hashes as itself."""
    folder = Path(model)
    if not folder.is_dir():
        return hashlib.sha256(str(model).encode()).hexdigest()[:16]
    digest = hashlib.sha256()
    files = sorted({f for pattern in WEIGHT_FILES for f in folder.glob(pattern) if f.is_file()})
    for file in files:
        digest.update(file.name.encode())
        with file.open("rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()[:16]


def freeze_lower_layers(model: Any, train_layers: int) -> int:
    """Train only the top `train_layers` decoder layers and the final norm (0: everything);
    returns the number of trainable parameters."""
    if train_layers > 0:
        layers = model.model.layers
        keep = {id(p) for layer in layers[-train_layers:] for p in layer.parameters()}
        keep |= {id(p) for p in model.model.norm.parameters()}
        for parameter in model.parameters():
            parameter.requires_grad = id(parameter) in keep
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def grpo_trainable_copy(config: GrpoParams, contract: dict[str, bool]) -> tuple[Any, Any, int, Any]:
    """`trainable_copy` of grpo.base_model as both GRPO trainers (stored and on-policy trees)
    train it: grpo.train_layers, or LoRA of rank grpo.lora_r and alpha twice that. The base
    must have learnt the prompt and output contract the prompts ask for (`contract`)."""
    require_contract(config.base_model, contract)
    return trainable_copy(
        config.base_model,
        config.threads,
        config.train_layers,
        config.lora,
        config.lora_r,
        2 * config.lora_r,
    )


def trainable_copy(
    base_model: str, threads: int, train_layers: int, lora: bool, lora_r: int, lora_alpha: int
) -> tuple[Any, Any, int, Any]:
    """(model, tokenizer, trainable parameter count, peft config or None): a fresh copy of the
    base (the cached one stays untouched), its lower layers frozen unless LoRA trains it."""
    from easy_core.executors.hf_models import load_causal_lm

    base, tokenizer = load_causal_lm(base_model, threads)
    model = type(base)(base.config)
    model.load_state_dict(base.state_dict())
    model.config.use_cache = True  # generation inside a trainer (GRPO) needs the KV cache
    trainable = freeze_lower_layers(model, 0 if lora else train_layers)
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=lora_r, lora_alpha=lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"
        )
    return model, tokenizer, trainable, peft_config


def trainer_args(staging: Path, seed: int, save_steps: int = 0) -> dict[str, Any]:
    """Arguments every TRL trainer config here shares: writes into the staging folder, logs
    every step, keeps only the latest resumable trainer checkpoint every `save_steps` steps (0:
    none; the checkpoint itself is published at the end), reports to no tracker, and runs on
    the CPU in float32 without gradient checkpointing unless a GPU is there
    (docs/ARCHITECTURE.md, "Running on CPU")."""
    import torch

    saves = {"save_strategy": "no"}
    if save_steps > 0:
        saves = {"save_strategy": "steps", "save_steps": save_steps, "save_total_limit": 1}
    return {
        "output_dir": str(staging / "trainer"),
        "logging_steps": 1,
        **saves,
        "report_to": [],
        "use_cpu": not torch.cuda.is_available(),
        "bf16": False,
        "gradient_checkpointing": False,
        "seed": seed,
    }


def staging_path(out: Path) -> Path:
    """The folder beside `out` that the trainer and the checkpoint are written into."""
    return out.with_name(out.name + ".tmp")


def staging_dir(out: Path) -> Path:
    """`staging_path`, emptied."""
    staging = staging_path(out)
    shutil.rmtree(staging, ignore_errors=True)
    return staging


RUN_FILE = "run.json"


def checkpoint_step(saved: Path) -> int:
    """The training step of a trainer checkpoint folder (`checkpoint-N`)."""
    return int(saved.name.split("-")[-1])


def resumable_staging(out: Path, run: dict[str, Any]) -> tuple[Path, Path | None]:
    """The staging folder beside `out` and the latest trainer checkpoint in it to resume from.
    A checkpoint is resumed only when the interrupted run was this one (`run`: its params and
    data hash, kept in run.json); otherwise the folder starts empty."""
    staging = staging_path(out)
    marker = staging / RUN_FILE
    if marker.is_file() and json.loads(marker.read_text(encoding="utf-8")) == run:
        saved = sorted((staging / "trainer").glob("checkpoint-*"), key=checkpoint_step)
        complete = [d for d in saved if (d / "trainer_state.json").is_file()]
        return staging, complete[-1] if complete else None
    staging = staging_dir(out)
    staging.mkdir(parents=True)
    write_json(marker, run)
    return staging, None


def publish_checkpoint(
    trainer: Any,
    tokenizer: Any,
    lora: bool,
    staging: Path,
    out: Path,
    card: str,
    contract: dict[str, bool],
) -> None:
    """Save the trained model (LoRA merged), tokenizer, card and contract (what its prompt
    shows and the step key order it learnt to write: OrchestratorParams.contract) into
    `staging`, then move it to `out` in one rename."""
    final = trainer.model.merge_and_unload() if lora else trainer.model
    # Trainers switch the KV cache off for training; a checkpoint without it generates one
    # full forward pass per token (hundreds of times slower).
    final.config.use_cache = True
    drop_quantization(final.config)
    final.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    shutil.rmtree(staging / "trainer", ignore_errors=True)
    (staging / RUN_FILE).unlink(missing_ok=True)
    atomic_write_text(staging / "README.md", card)
    write_json(staging / CONTRACT_FILE, contract)
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)


def write_report(
    report: Path,
    metrics: dict[str, Any],
    curve: list[dict[str, float]],
    plotted: str,
    ylabel: str,
    title: str,
) -> None:
    """metrics.json, curve.json and curve.png (the `plotted` field against the step)."""
    write_json(report / "metrics.json", metrics)
    atomic_write_text(report / "curve.json", json.dumps(curve, indent=1))
    plot_curve(
        [{"step": c["step"], "loss": c[plotted]} for c in curve],
        report / "curve.png",
        ylabel=ylabel,
        title=title,
    )


def plot_curve(
    curve: list[dict[str, float]],
    path: Path,
    ylabel: str = "SFT loss (answer tokens)",
    title: str = "SFT warm start",
) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    figure, axis = plt.subplots(figsize=(5, 3.2))
    steps, values = [c["step"] for c in curve], [c["loss"] for c in curve]
    axis.plot(steps, values, marker="o", alpha=0.6, label="per step")
    window = 5
    if len(values) >= 2 * window:  # one step is one prompt's group: show the trend as well
        running = [sum(values[i - window : i]) / window for i in range(window, len(values) + 1)]
        axis.plot(steps[window - 1 :], running, color="black", label=f"mean of last {window}")
        axis.legend(fontsize="small")
    axis.set_xlabel("step")
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def privileged_note(policies: list[str]) -> str:
    """The model card's line on privileged guidance: said whenever a policy that reads
    outcomes (the oracle) taught or guided the training."""
    used = sorted(set(policies) & PRIVILEGED_POLICIES)
    if not used:
        return ""
    return (
        f"**Privileged guidance:** {', '.join(used)} (reads the simulated world's outcomes) "
        "guided this training; its evaluations measure a model that saw what no deployed "
        "system can.\n\n"
    )
