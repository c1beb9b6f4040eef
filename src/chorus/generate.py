"""Sample k completions per task with transformers `generate` (CPU or GPU), or vLLM.

Rows `{task_id, sample_id, completion}` are appended to `<out>.partial` as they come,
so a killed job resumes where it stopped (pairs already there are skipped); `out_jsonl`
appears atomically, in (task, sample_id) order, once every row is there.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zlib
from pathlib import Path

from chorus.io import Progress, read_jsonl, write_jsonl
from chorus.prompts import build_prompt, render_prompt
from chorus.tasks import Task

log = logging.getLogger(__name__)


def _chunk_seed(seed: int, task_id: str, first_sample: int) -> int:
    return zlib.crc32(f"{seed}/{task_id}/{first_sample}".encode())


def sample_completions(
    model_dir: str | Path,
    tasks: list[Task],
    k: int,
    out_jsonl: str | Path,
    *,
    temperature: float = 0.8,
    top_p: float = 0.95,
    max_new_tokens: int = 512,
    batch_size: int | None = None,
    seed: int = 0,
    device: str | None = None,
    dtype=None,
    use_vllm: bool = False,
) -> dict:
    """Write k completions per task to `out_jsonl` and return statistics (samples,
    new_tokens, seconds, tokens_per_s, resumed). Pending (task, sample) pairs are drawn
    `batch_size` at a time (default 64 on cuda, 8 on cpu), across tasks, left-padded;
    each batch is seeded by (seed, its first task and sample id), so a re-run with the
    same settings and the same pending pairs draws the same samples. device: None = cuda
    (bfloat16) when available, else cpu (float32).
    use_vllm: sample with vLLM instead (GPU only; needs the vllm package)."""
    out_jsonl = Path(out_jsonl)
    out_jsonl.parent.mkdir(parents=True, exist_ok=True)
    partial = out_jsonl.with_name(out_jsonl.name + ".partial")
    done = {(r["task_id"], int(r["sample_id"])) for r in read_jsonl(partial)}
    todo = {t.id: [i for i in range(k) if (t.id, i) not in done] for t in tasks}
    todo = {task_id: ids for task_id, ids in todo.items() if ids}
    start, new_tokens = time.perf_counter(), 0
    if todo:
        sampler = _vllm_sampler if use_vllm else _hf_sampler
        progress = Progress("generated samples", sum(len(ids) for ids in todo.values()))
        with open(partial, "a") as sidecar:
            for task_id, sample_id, text, n_tokens in sampler(
                model_dir, [t for t in tasks if t.id in todo], todo,
                temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                batch_size=batch_size, seed=seed, device=device, dtype=dtype,
            ):
                new_tokens += n_tokens
                row = {"task_id": task_id, "sample_id": sample_id, "completion": text}
                sidecar.write(json.dumps(row) + "\n")
                sidecar.flush()
                os.fsync(sidecar.fileno())
                progress.update()
    rows = {(r["task_id"], int(r["sample_id"])): r for r in read_jsonl(partial)}
    ordered = [rows[(t.id, i)] for t in tasks for i in range(k)]
    write_jsonl(out_jsonl, ordered)
    partial.unlink(missing_ok=True)
    elapsed = time.perf_counter() - start
    stats = {
        "samples": len(ordered),
        "generated": sum(len(ids) for ids in todo.values()),
        "resumed": len(done),
        "new_tokens": new_tokens,
        "seconds": elapsed,
        "tokens_per_s": new_tokens / elapsed if elapsed and new_tokens else None,
    }
    log.info("generation: %s", stats)
    return stats


def _hf_sampler(model_dir, tasks, todo, *, temperature, top_p, max_new_tokens, batch_size, seed, device, dtype):
    """Yields (task_id, sample_id, text, new tokens) with transformers generate: the
    pending samples of all tasks, in order, `batch_size` left-padded prompts at a time."""
    import torch

    from chorus.modeling import default_device, load_model_and_tokenizer

    device = device or default_device()
    batch_size = batch_size or (64 if device.startswith("cuda") else 8)
    model, tokenizer = load_model_and_tokenizer(model_dir, device, dtype)
    model.eval()
    tokenizer.padding_side = "left"
    sampling = temperature > 0
    stop_ids = [i for i in {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|end|>")}
                if isinstance(i, int) and i >= 0 and i != tokenizer.unk_token_id]
    prompts = {t.id: render_prompt(tokenizer, build_prompt(t)) for t in tasks}
    pending = [(t.id, i) for t in tasks for i in todo[t.id]]
    for chunk in range(0, len(pending), batch_size):
        items = pending[chunk : chunk + batch_size]
        inputs = tokenizer([prompts[task_id] for task_id, _ in items], return_tensors="pt",
                           padding=True, add_special_tokens=False).to(device)
        torch.manual_seed(_chunk_seed(seed, *items[0]))
        with torch.no_grad():
            output = model.generate(
                **inputs,
                do_sample=sampling,
                temperature=temperature if sampling else None,
                top_p=top_p if sampling else None,
                top_k=None,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=stop_ids or None,
            )
        completions = output[:, inputs["input_ids"].shape[1] :].cpu()
        for (task_id, sample_id), tokens in zip(items, completions):
            n_tokens = int((tokens != tokenizer.pad_token_id).sum())
            yield task_id, sample_id, tokenizer.decode(tokens, skip_special_tokens=True), n_tokens


def _vllm_sampler(model_dir, tasks, todo, *, temperature, top_p, max_new_tokens, batch_size, seed, device, dtype):
    """Yields (task_id, sample_id, text, new tokens) with vLLM (all prompts at once)."""
    try:
        from vllm import LLM, SamplingParams
    except ImportError as err:
        raise RuntimeError("use_vllm needs the vllm package on a GPU machine") from err
    from chorus.modeling import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    llm = LLM(model=str(model_dir), seed=seed, dtype=str(dtype or "auto").replace("torch.", ""))
    requests, params = [], []
    for task in tasks:
        prompt = render_prompt(tokenizer, build_prompt(task))
        for sample_id in todo[task.id]:
            requests.append((task.id, sample_id, prompt))
            params.append(SamplingParams(
                n=1, temperature=temperature, top_p=top_p if temperature > 0 else 1.0,
                max_tokens=max_new_tokens, seed=_chunk_seed(seed, task.id, sample_id),
            ))
    outputs = llm.generate([r[2] for r in requests], params)
    for (task_id, sample_id, _), output in zip(requests, outputs):
        completion = output.outputs[0]
        yield task_id, sample_id, completion.text, len(completion.token_ids)
