"""SFT warm start of the orchestrator with TRL's SFTTrainer.

Data: the teacher's turns (`sft_data`), one conversational prompt-completion example per turn,
so the loss is on the orchestrator's answer only. On CPU the defaults train the top
`train_layers` decoder layers of the packaged SmolLM2-135M-Instruct (the rest frozen: backward
stops there, several times cheaper per step) for a few steps; the GPU profile in the README
trains a 1.5B-3B model fully or with LoRA (`lora: true`).

Output (written to a temporary folder, then moved into place): the checkpoint (`save_pretrained`
weights, config and tokenizer), a model card (README.md) naming the base model, the params and
the data file's hash, the training curve (`curve.json` and `curve.png`) and `metrics.json`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from easy_core.errors import ConfigError
from easy_core.params import SftParams
from easy_core.storage import atomic_write_text, write_json


def load_examples(path: str | Path, limit: int) -> list[dict[str, Any]]:
    """Teacher turns as TRL prompt-completion examples (the last message is the answer)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"SFT data {path} not found; make it with `dvc repro sft_data`")
    examples = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        record = json.loads(line)
        messages = record.get("messages") or []
        if len(messages) < 2 or messages[-1].get("role") != "assistant":
            raise ConfigError(f"{path}:{number}: expected chat messages ending with the answer")
        examples.append({"prompt": messages[:-1], "completion": messages[-1:]})
        if len(examples) >= limit:
            break
    if not examples:
        raise ConfigError(f"{path} holds no examples")
    return examples


def file_hash(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


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


def train_sft(
    sft: SftParams, out_dir: str | Path | None = None, report_dir: str | Path | None = None
) -> dict[str, Any]:
    """Fine-tune, save the checkpoint with its card; the training curve (curve.json, curve.png)
    and metrics.json go to `report_dir` (default: the checkpoint folder). Returns the metrics."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from easy_core.training.models import load_orchestrator

    out = Path(out_dir or sft.out)
    examples = load_examples(sft.data, sft.max_examples)
    os.environ.setdefault("OMP_NUM_THREADS", str(sft.threads))
    torch.manual_seed(sft.seed)
    base, tokenizer = load_orchestrator(sft.base_model, sft.threads)
    model = type(base)(base.config)  # a fresh copy: the cached base stays untouched
    model.load_state_dict(base.state_dict())
    trainable = freeze_lower_layers(model, 0 if sft.lora else sft.train_layers)
    peft_config = None
    if sft.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=sft.lora_r,
            lora_alpha=sft.lora_alpha,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        )
    staging = out.with_name(out.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    config = SFTConfig(
        output_dir=str(staging / "trainer"),
        max_steps=sft.max_steps,
        per_device_train_batch_size=sft.batch_size,
        gradient_accumulation_steps=sft.grad_accum,
        learning_rate=sft.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_length=sft.max_length,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        gradient_checkpointing=False,
        seed=sft.seed,
        dataloader_num_workers=0,
        dataset_num_proc=None,
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list(examples),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    curve = [
        {"step": entry["step"], "loss": entry["loss"]}
        for entry in trainer.state.log_history
        if "loss" in entry
    ]
    final = trainer.model.merge_and_unload() if sft.lora else trainer.model
    # Trainers switch the KV cache off for training; a checkpoint without it generates one
    # full forward pass per token (hundreds of times slower).
    final.config.use_cache = True
    final.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    shutil.rmtree(staging / "trainer", ignore_errors=True)
    metrics = {
        "base_model": sft.base_model,
        "examples": len(examples),
        "steps": sft.max_steps,
        "trainable_parameters": trainable,
        "train_seconds": seconds,
        "first_loss": curve[0]["loss"] if curve else None,
        "last_loss": curve[-1]["loss"] if curve else None,
        "data_sha256": file_hash(sft.data),
    }
    atomic_write_text(staging / "README.md", model_card(sft, metrics, curve))
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    report = Path(report_dir) if report_dir is not None else out
    write_json(report / "metrics.json", metrics)
    atomic_write_text(report / "curve.json", json.dumps(curve, indent=1))
    plot_curve(curve, report / "curve.png")
    return metrics


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
    axis.plot([c["step"] for c in curve], [c["loss"] for c in curve], marker="o")
    axis.set_xlabel("step")
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def model_card(sft: SftParams, metrics: dict[str, Any], curve: list[dict[str, float]]) -> str:
    params = "\n".join(f"- {k}: {v}" for k, v in sft.model_dump().items())
    losses = ", ".join(f"{c['loss']:.3f}" for c in curve)
    return (
        "---\nlibrary_name: transformers\ntags: [easy, orchestrator, sft, trl]\n---\n\n"
        f"# easy orchestrator, SFT warm start of {sft.base_model}\n\n"
        "Writes one JSON plan per turn (the contract in easy's DESIGN.md) for the executor pool "
        "its prompt describes. Trained with TRL SFTTrainer on teacher turns.\n\n"
        f"Data: `{sft.data}` (sha256 {metrics['data_sha256']}), {metrics['examples']} examples."
        f"\n\nLoss: {metrics['first_loss']} -> {metrics['last_loss']} in {metrics['steps']} "
        f"steps ({metrics['train_seconds']:.0f} s); per step: {losses}.\n\nParams:\n{params}\n"
    )
