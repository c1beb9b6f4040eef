"""Sample k completions per task with transformers `generate` (CPU or GPU)."""

from __future__ import annotations

import json
import logging
import os
import time
import zlib
from pathlib import Path

from chorus.io import read_jsonl
from chorus.modeling import load_model_and_tokenizer
from chorus.prompts import build_prompt
from chorus.tasks import Task

log = logging.getLogger(__name__)


def sample_completions(
    model_dir: str | Path,
    tasks: list[Task],
    k: int,
    out_jsonl: str | Path,
    *,
    temperature: float = 0.8,
    top_p: float = 0.95,
    max_new_tokens: int = 512,
    batch_size: int = 8,
    seed: int = 0,
    device: str = "cpu",
) -> dict:
    """Write {task_id, sample_id, completion} rows, k per task. Rows are appended to
    `<out>.partial` as they come, so a killed job resumes where it stopped; `out_jsonl`
    appears atomically when every row is there. Sample i of a task is drawn with seed
    (seed, task, i), so a resumed or re-run job gives the same samples."""
    import torch

    out_jsonl = Path(out_jsonl)
    partial = out_jsonl.with_name(out_jsonl.name + ".partial")
    done = {(r["task_id"], r["sample_id"]) for r in read_jsonl(partial)}
    model, tokenizer = load_model_and_tokenizer(model_dir, device)
    model.eval()
    tokenizer.padding_side = "left"
    todo = [(t, i) for t in tasks for i in range(k) if (t.id, i) not in done]
    start, new_tokens = time.perf_counter(), 0
    out_jsonl.parent.mkdir(parents=True, exist_ok=True)
    with open(partial, "a") as sidecar:
        for task in tasks:
            indices = [i for t, i in todo if t.id == task.id]
            if not indices:
                continue
            prompt = tokenizer.apply_chat_template(
                build_prompt(task), tokenize=False, add_generation_prompt=True
            )
            inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).to(device)
            for chunk in range(0, len(indices), batch_size):
                ids = indices[chunk : chunk + batch_size]
                torch.manual_seed(zlib.crc32(f"{seed}/{task.id}/{ids[0]}".encode()))
                with torch.no_grad():
                    output = model.generate(
                        **inputs,
                        do_sample=temperature > 0,
                        temperature=temperature if temperature > 0 else None,
                        top_p=top_p if temperature > 0 else None,
                        max_new_tokens=max_new_tokens,
                        num_return_sequences=len(ids),
                        pad_token_id=tokenizer.pad_token_id,
                    )
                completions = output[:, inputs["input_ids"].shape[1] :]
                new_tokens += int((completions != tokenizer.pad_token_id).sum())
                for sample_id, tokens in zip(ids, completions):
                    text = tokenizer.decode(tokens, skip_special_tokens=True)
                    row = {"task_id": task.id, "sample_id": sample_id, "completion": text}
                    sidecar.write(json.dumps(row) + "\n")
                sidecar.flush()
                os.fsync(sidecar.fileno())
    rows = {(r["task_id"], r["sample_id"]): r for r in read_jsonl(partial)}
    ordered = [rows[(t.id, i)] for t in tasks for i in range(k)]
    from chorus.io import write_jsonl

    write_jsonl(out_jsonl, ordered)
    partial.unlink(missing_ok=True)
    elapsed = time.perf_counter() - start
    stats = {"samples": len(ordered), "new_tokens": new_tokens, "seconds": elapsed,
             "tokens_per_s": new_tokens / elapsed if elapsed else None}
    log.info("generation: %s", stats)
    return stats
