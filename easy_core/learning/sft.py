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
import time
from pathlib import Path
from typing import Any

from easy_core.core.errors import ConfigError
from easy_core.core.params import SftParams, read_contract
from easy_core.learning.checkpoints import (
    checkpoint_step,
    privileged_note,
    publish_checkpoint,
    resumable_staging,
    trainable_copy,
    trainer_args,
    write_report,
)


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


def train_sft(
    sft: SftParams,
    out_dir: str | Path | None = None,
    report_dir: str | Path | None = None,
    callbacks: list[Any] | None = None,
) -> dict[str, Any]:
    """Fine-tune, save the checkpoint with its card; the training curve (curve.json, curve.png)
    and metrics.json go to `report_dir` (default: the checkpoint folder). Returns the metrics.

    Every sft.save_steps steps the trainer's state is kept in the staging folder; a run that
    stopped goes on from there when it is started again with the same params and data.
    `callbacks`: extra transformers TrainerCallbacks."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    out = Path(out_dir or sft.out)
    examples = load_examples(sft.data, sft.max_examples)
    os.environ.setdefault("OMP_NUM_THREADS", str(sft.threads))
    torch.manual_seed(sft.seed)
    model, tokenizer, trainable, peft_config = trainable_copy(
        sft.base_model, sft.threads, sft.train_layers, sft.lora, sft.lora_r, sft.lora_alpha
    )
    run = {
        **sft.model_dump(mode="json", exclude={"out", "threads", "save_steps"}),
        "data_sha256": file_hash(sft.data),
    }
    staging, resume_from = resumable_staging(out, run)
    config = SFTConfig(
        **trainer_args(staging, sft.seed, sft.save_steps),
        max_steps=sft.max_steps,
        per_device_train_batch_size=sft.batch_size,
        gradient_accumulation_steps=sft.grad_accum,
        learning_rate=sft.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_length=sft.max_length,
        dataloader_num_workers=0,
        dataset_num_proc=None,
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list(examples),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
    )
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    seconds = time.perf_counter() - started
    curve = [
        {"step": entry["step"], "loss": entry["loss"]}
        for entry in trainer.state.log_history
        if "loss" in entry
    ]
    metrics = {
        "base_model": sft.base_model,
        "examples": len(examples),
        "steps": sft.max_steps,
        "trainable_parameters": trainable,
        "train_seconds": seconds,
        "resumed_from_step": checkpoint_step(resume_from) if resume_from else 0,
        "first_loss": curve[0]["loss"] if curve else None,
        "last_loss": curve[-1]["loss"] if curve else None,
        "data_sha256": run["data_sha256"],
    }
    # the checkpoint learnt the prompt and output contract its data was written in
    contract = read_contract(data_summary(sft.data))
    metrics.update(contract)
    card = model_card(sft, metrics, curve)
    publish_checkpoint(trainer, tokenizer, sft.lora, staging, out, card, contract)
    report = Path(report_dir) if report_dir is not None else out
    write_report(report, metrics, curve, "loss", "SFT loss (answer tokens)", "SFT warm start")
    return metrics


def data_summary(data: str) -> dict[str, Any]:
    """The data set's summary.json (written beside it by `easy sft-data`), or {}: its teacher,
    and the output contract its answers are written in."""
    summary = Path(data).parent / "summary.json"
    if not summary.is_file():
        return {}
    return json.loads(summary.read_text(encoding="utf-8"))


def teacher_of(data: str) -> str:
    """The teacher named in the data set's summary.json, or ""."""
    return str(data_summary(data).get("teacher", ""))


def model_card(sft: SftParams, metrics: dict[str, Any], curve: list[dict[str, float]]) -> str:
    params = "\n".join(f"- {k}: {v}" for k, v in sft.model_dump().items())
    losses = ", ".join(f"{c['loss']:.3f}" for c in curve)
    resumed = (
        f" after resuming at step {metrics['resumed_from_step']}"
        if metrics["resumed_from_step"]
        else ""
    )
    return (
        "---\nlibrary_name: transformers\ntags: [easy, orchestrator, sft, trl]\n---\n\n"
        f"# easy orchestrator, SFT warm start of {sft.base_model}\n\n"
        "Writes one JSON plan per turn (the contract in easy's docs/ARCHITECTURE.md) for the "
        "executor pool its prompt describes. Trained with TRL SFTTrainer on teacher turns.\n\n"
        f"Data: `{sft.data}` (sha256 {metrics['data_sha256']}), {metrics['examples']} examples."
        f"\n\n{privileged_note([teacher_of(sft.data)])}"
        f"Loss: {metrics['first_loss']} -> {metrics['last_loss']} in {metrics['steps']} "
        f"steps ({metrics['train_seconds']:.0f} s{resumed}); per step: {losses}.\n\n"
        f"Params:\n{params}\n"
    )
