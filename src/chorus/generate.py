"""Sample k completions per task: transformers `generate` (CPU or GPU), the static-cache
decoder replayed from a CUDA graph (`StaticDecoder`), transformers' continuous batching
engine (`generate_batch`: paged KV cache, requests of all tasks scheduled together), or
vLLM. `sampler="auto"` picks vLLM on a GPU when it is installed, else the static decoder
on a GPU (the fastest measured: resolve_sampler), and plain `generate` on CPU.

Rows `{task_id, sample_id, completion}` are appended to the journal `<out>.partial`
(chorus.journal) as they come, so a killed job resumes where it stopped (pairs already
there are skipped); `out_jsonl` appears atomically, in (task, sample_id) order, once
every row is there.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
import zlib
from pathlib import Path

from chorus.io import Progress
from chorus.journal import Journal, journal_path
from chorus.prompts import build_prompt, render_prompt
from chorus.tasks import Task
from chorus.training import resolve_device

log = logging.getLogger(__name__)


def _chunk_seed(seed: int, task_id: str, first_sample: int) -> int:
    return zlib.crc32(f"{seed}/{task_id}/{first_sample}".encode())


def _sample_key(row: dict) -> tuple[str, int]:
    return row["task_id"], int(row["sample_id"])


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
    sampler: str = "auto",
) -> dict:
    """Write k completions per task to `out_jsonl` and return statistics (samples,
    new_tokens, seconds, tokens_per_s, resumed). Pending (task, sample) pairs are drawn
    `batch_size` at a time (default 64 on cuda, 8 on cpu), across tasks, left-padded;
    each batch is seeded by (seed, its first task and sample id), so a re-run with the
    same settings and the same pending pairs draws the same samples. device: None = cuda
    (bfloat16) when available, else cpu (float32).
    sampler: auto | generate | continuous | static | vllm (see resolve_sampler; `static`:
    StaticDecoder, a static KV cache whose decode step is replayed from a CUDA graph on a
    GPU, `batch_size` prompts at a time, default 128 on cuda); `continuous` draws
    `batch_size` requests per engine call (default 1024 on cuda, 16 on cpu) and seeds each
    call like a `generate` batch, so it resumes and repeats the same way."""
    out_jsonl = Path(out_jsonl)
    out_jsonl.parent.mkdir(parents=True, exist_ok=True)
    journal = Journal(journal_path(out_jsonl), _sample_key)
    resumed = len(journal.done)
    todo = {t.id: [i for i in range(k) if (t.id, i) not in journal.done] for t in tasks}
    todo = {task_id: ids for task_id, ids in todo.items() if ids}
    start, new_tokens = time.perf_counter(), 0
    sampler = resolve_sampler(sampler, device)
    if todo:
        draw = {"generate": _hf_sampler, "continuous": _continuous_sampler, "static": _static_sampler,
                "vllm": _vllm_sampler}[sampler]
        progress = Progress("generated samples", sum(len(ids) for ids in todo.values()))
        with journal:
            for task_id, sample_id, text, n_tokens in draw(
                model_dir, [t for t in tasks if t.id in todo], todo,
                temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                batch_size=batch_size, seed=seed, device=device, dtype=dtype,
            ):
                new_tokens += n_tokens
                journal.append({"task_id": task_id, "sample_id": sample_id, "completion": text})
                progress.update()
    ordered = [journal.done[(t.id, i)] for t in tasks for i in range(k)]
    journal.finish(out_jsonl, ordered)
    elapsed = time.perf_counter() - start
    stats = {
        "samples": len(ordered),
        "generated": sum(len(ids) for ids in todo.values()),
        "resumed": resumed,
        "sampler": sampler,
        "new_tokens": new_tokens,
        "seconds": elapsed,
        "tokens_per_s": new_tokens / elapsed if elapsed and new_tokens else None,
    }
    log.info("generation: %s", stats)
    return stats


SAMPLERS = ("auto", "generate", "continuous", "static", "vllm")


def resolve_sampler(sampler: str = "auto", device: str | None = None) -> str:
    """The sampler `auto` stands for: vllm on a GPU when the package is installed, else
    the CUDA-graph static decoder on a GPU, and plain `generate` on CPU. Measured on an
    H200 with SmolLM2-135M (benchmarks/results/rl_loop_h200.json, ~1k-token prompts, 512
    new tokens): static 10.3k tokens/s at batch 64 and 23.0k at batch 256, against 621
    for `generate` and 528-795 for transformers' continuous batching."""
    import importlib.util

    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, not {sampler!r}")
    if sampler != "auto":
        return sampler
    if not resolve_device(device).startswith("cuda"):
        return "generate"
    return "vllm" if importlib.util.find_spec("vllm") is not None else "static"


def _stop_ids(tokenizer) -> list[int]:
    """End-of-sequence ids: eos and the chat template's end-of-turn marker when it exists."""
    candidates = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|end|>")}
    return sorted(i for i in candidates if isinstance(i, int) and i >= 0 and i != tokenizer.unk_token_id)


def _hf_sampler(model_dir, tasks, todo, *, temperature, top_p, max_new_tokens, batch_size, seed, device, dtype):
    """Yields (task_id, sample_id, text, new tokens) with transformers generate: the
    pending samples of all tasks, in order, `batch_size` left-padded prompts at a time."""
    import torch

    from chorus.modeling import load_model_and_tokenizer

    device = resolve_device(device)
    batch_size = batch_size or (64 if device.startswith("cuda") else 8)
    model, tokenizer = load_model_and_tokenizer(model_dir, device, dtype)
    model.eval()
    tokenizer.padding_side = "left"
    sampling = temperature > 0
    stop_ids = _stop_ids(tokenizer)
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


def continuous_batching_kwargs(device: str, longest_prompt: int, max_new_tokens: int, requests: int) -> dict:
    """ContinuousBatchingConfig fields: on a GPU the engine sizes its paged cache from half
    the free memory (its default, 90%, leaves nothing to a process sharing the GPU); on CPU
    a cache just large enough for the requests, since sizing it from host memory allocates
    gigabytes and takes tens of seconds."""
    if device.startswith("cuda"):
        return {"max_memory_percent": 0.5}
    page = 64
    pages_per_request = -(-(longest_prompt + max_new_tokens) // page)
    return {"page_size": page, "num_blocks": pages_per_request * requests + 4,
            "max_batch_tokens": max(2048, longest_prompt)}


def _continuous_sampler(model_dir, tasks, todo, *, temperature, top_p, max_new_tokens, batch_size, seed, device,
                        dtype):
    """Yields (task_id, sample_id, text, new tokens) with transformers' continuous batching
    (`generate_batch`): `batch_size` requests per engine call, scheduled by the engine."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    from chorus.modeling import load_model_and_tokenizer

    device = resolve_device(device)
    batch_size = batch_size or (1024 if device.startswith("cuda") else 16)
    model, tokenizer = load_model_and_tokenizer(model_dir, device, dtype)
    model.eval()
    sampling = temperature > 0
    generation = GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=sampling, temperature=temperature if sampling else None,
        top_p=top_p if sampling else None, top_k=None, eos_token_id=_stop_ids(tokenizer) or None,
        pad_token_id=tokenizer.pad_token_id,
    )
    prompts = {t.id: tokenizer(render_prompt(tokenizer, build_prompt(t)), add_special_tokens=False)["input_ids"]
               for t in tasks}
    pending = [(t.id, i) for t in tasks for i in todo[t.id]]
    for chunk in range(0, len(pending), batch_size):
        items = pending[chunk : chunk + batch_size]
        inputs = [prompts[task_id] for task_id, _ in items]
        engine = ContinuousBatchingConfig(seed=_chunk_seed(seed, *items[0]), **continuous_batching_kwargs(
            device, max(map(len, inputs)), max_new_tokens, len(items)))
        outputs = model.generate_batch(inputs, generation_config=generation, continuous_batching_config=engine,
                                       progress_bar=False)
        # request ids are req_<position in inputs>
        by_position = {int(request_id.rsplit("_", 1)[-1]): out for request_id, out in outputs.items()}
        for position, (task_id, sample_id) in enumerate(items):
            out = by_position.get(position)
            if out is None or out.error:
                raise RuntimeError(f"continuous batching lost request {position}: {getattr(out, 'error', None)}")
            tokens = list(out.generated_tokens)
            yield task_id, sample_id, tokenizer.decode(tokens, skip_special_tokens=True), len(tokens)


def draw_tokens(logits, temperature: float, top_p: float | None = None, noise=None):
    """The next token per row of `logits` [batch, vocab]: argmax at temperature 0, else a
    draw from softmax(logits / temperature), restricted when `top_p` < 1 to the smallest
    set of most probable tokens whose mass reaches top_p. The draw is an exponential race,
    argmax p_i / E_i with E_i ~ Exp(1), which picks i with probability p_i / sum(p) like
    `multinomial` but in elementwise kernels and an argmax: no host sync, so it runs
    inside a CUDA graph. `noise`: the E_i, drawn by the caller (a graph then holds no
    random op); None: drawn here."""
    import torch

    logits = logits.float()
    if temperature <= 0:
        return logits.argmax(-1)
    probs = (logits / temperature).softmax(-1)
    order = None
    if top_p is not None and top_p < 1.0:
        probs, order = probs.sort(-1, descending=True)
        probs = probs.masked_fill(probs.cumsum(-1) - probs > top_p, 0.0)  # mass before the token already >= top_p
    if noise is None:
        noise = torch.empty_like(probs).exponential_()
    # clamped: an exact 0 would make 0/0 = nan, which argmax picks
    picked = (probs / noise.clamp(min=torch.finfo(probs.dtype).tiny)).argmax(-1)
    return picked if order is None else order.gather(-1, picked[:, None]).squeeze(-1)


PREFIX_ATTENTION = "chorus_prefix_sdpa"


def _prefix_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers' sdpa over the first `attention_mask.shape[-1]` slots of the cache: a
    decode step given a mask narrower than the static cache reads only that prefix. A
    one-token query with grouped KV heads attends per KV head, its query heads as rows
    (what transformers' pack_gqa does, except under torch.compile, where it copies every
    KV head `groups` times: repeat_kv, 3x the cache traffic for SmolLM2)."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is not None and attention_mask.ndim == 4:  # unconditional: one compiled graph for all widths
        key, value = key[..., : attention_mask.shape[-1], :], value[..., : attention_mask.shape[-1], :]
    groups = getattr(module, "num_key_value_groups", 1)
    if query.shape[2] != 1 or groups == 1 or kwargs.get("position_bias") is not None or kwargs.get("softcap"):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    batch, heads, _, dim = query.shape
    packed = query.reshape(batch, heads // groups, groups, dim)
    if attention_mask is not None and attention_mask.ndim == 4 and attention_mask.shape[1] != 1:
        attention_mask = attention_mask.reshape(batch, heads // groups, groups, -1)  # per-head masks follow
    out = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling)
    return out.reshape(batch, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def _register_prefix_attention() -> str:
    """Registers PREFIX_ATTENTION with transformers (attention and mask: sdpa's mask)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(PREFIX_ATTENTION, _prefix_sdpa)
    AttentionMaskInterface.register(PREFIX_ATTENTION, sdpa_mask)
    return PREFIX_ATTENTION


class StaticDecoder:
    """Batched sampling with a static KV cache (transformers `StaticCache`) whose decode
    step runs as a captured CUDA graph on a GPU (eagerly on CPU, where it gives the same
    tokens as `generate` under greedy decoding).

    Per-step overhead, not bandwidth, bounds `generate` for small models (90 ms a step for
    a 135M model at batch 64 on an H200: thousands of kernel launches and Python). One
    graph replays a whole step: the forward, the sampling (temperature, top-p, and the
    draw as an exponential race, draw_tokens) and the bookkeeping (the token written to
    the output, rows that hit a stop id marked done, the next key slot made valid).
    Everything a step reads and writes lives in fixed buffers updated in place, including
    the count of tokens written (a device tensor), so replays need nothing from the host
    but the step's random numbers, drawn into a buffer before each replay (no random op
    in the graph: a failed capture cannot leave the generator in capture mode); the cache
    advances its own position counter on the device. Attention reads only the cache's
    filled prefix, rounded up to `kv_block` slots (one graph per prefix length, captured
    when decoding reaches it), so a step's cost follows the sequence so far rather than
    prompt + max_new_tokens (`kv_block=None`: the whole cache every step). Finished rows
    would otherwise decode padding until the longest row ends: when at most half the rows
    are still live (`compact`), the finished ones leave the batch (their tokens kept
    aside) and the state and cache shrink to the live rows, whose steps get graphs of the
    smaller size. The first `WARMUP` decode steps of a batch size run eagerly on a side
    stream (they are real steps) before its first capture. `compile`: decode steps run the
    model's decoder layers through torch.compile (off by default, see __init__)."""

    WARMUP = 3
    KV_BLOCK = 256
    CHECK_EVERY = 16  # steps between the host's looks at finished rows (one sync each)
    COMPACT_MIN_ROWS = 16  # smaller batches are not worth compacting

    def __init__(self, model, use_graph: bool | None = None, kv_block: int | None = KV_BLOCK, compact: bool = True,
                 compile: bool = False):
        import torch

        self.model = model
        self.device = next(model.parameters()).device
        self.use_graph = self.device.type == "cuda" if use_graph is None else use_graph
        self.kv_block = kv_block
        self.compact = compact
        self.torch = torch
        # transformers 5.25 names the cache argument `cache` (`past_key_values` deprecated)
        self.cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        # a graph replays every kernel of the eager step (over a thousand for a 30-layer Llama,
        # a few microseconds each: most of a 135M model's 6 ms step at batch 64); `compile` runs the
        # decoder layers through inductor, which fuses them. Off by default: on an H100 it
        # compiled for 76 s and stepped 2x slower, 12.8 ms more a step, about what expanding
        # the KV heads costs (transformers' sdpa does under dynamo; _prefix_sdpa no longer
        # does); not re-measured since. benchmarks/rl_loop.py --only decode measures it.
        self.compiled = compile
        self._compiled_layers: dict = {}  # the repeated layers -> their compiled call, once compiling

    def _forward(self, cache, **inputs):
        return self.model(**inputs, **{self.cache_arg: cache}, use_cache=True, logits_to_keep=1).logits[:, -1]

    def _repeated_layers(self) -> list:
        """The model's repeated blocks (transformers names their classes `_no_split_modules`)."""
        names = set(getattr(self.model, "_no_split_modules", None) or ())
        return [module for module in self.model.modules() if type(module).__name__ in names]

    @contextlib.contextmanager
    def _layers_compiled(self):
        """Decoder layers run compiled (regional compilation, as nn.Module.compile does,
        undone on exit: training and the prefill see the model as it was)."""
        torch = self.torch
        if not self.compiled:
            yield
            return
        if not self._compiled_layers:  # the module walk once, not every step
            self._compiled_layers = {layer: torch.compile(layer._call_impl, dynamic=True)
                                     for layer in self._repeated_layers()}
        layers = list(self._compiled_layers)
        previous = [layer._compiled_call_impl for layer in layers]
        for layer in layers:
            layer._compiled_call_impl = self._compiled_layers[layer]
        # each layer's index (its cache slot) is a constant to dynamo: one graph per layer,
        # all of them past the first from inductor's cache (same code, different inputs)
        limit = max(torch._dynamo.config.recompile_limit, 2 * len(layers) + 8)
        try:
            with torch._dynamo.config.patch(recompile_limit=limit):
                yield
        finally:
            for layer, compiled in zip(layers, previous):
                layer._compiled_call_impl = compiled

    @staticmethod
    def _view(slots: int, max_len: int, kv_block: int | None) -> int:
        """Cache slots a decode step reads when `slots` of them are filled."""
        if not kv_block:
            return max_len
        return min(max_len, -(-slots // kv_block) * kv_block)

    def generate(self, input_ids, attention_mask, *, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float | None = None, stop_ids=(), pad_id: int = 0, on_finished=None):
        """New tokens [batch, <= max_new_tokens] for left-padded prompts; after a stop id a
        row holds `pad_id`. Returns (tokens, lengths): lengths count tokens up to and
        including the first stop id. `on_finished(row, ids)` hears of each row once, with
        the ids it returns: rows that stop early within CHECK_EVERY steps of their stop id
        (while the rest decode), the others at the end."""
        switch = getattr(self.model, "set_attn_implementation", None)
        if switch is None:  # not a transformers model: its own attention reads the whole cache
            return self._generate(input_ids, attention_mask, max_new_tokens, temperature, top_p, stop_ids, pad_id,
                                  on_finished, None)
        previous = self.model.config._attn_implementation
        switch(_register_prefix_attention())
        # a model that keeps its own attention (no dynamic switch) reads the whole cache
        prefix = self.model.config._attn_implementation == PREFIX_ATTENTION
        try:
            return self._generate(input_ids, attention_mask, max_new_tokens, temperature, top_p, stop_ids, pad_id,
                                  on_finished, self.kv_block if prefix else None)
        finally:
            switch(previous)

    def _generate(self, input_ids, attention_mask, max_new_tokens, temperature, top_p, stop_ids, pad_id,
                  on_finished, kv_block):
        torch = self.torch
        from transformers import StaticCache

        batch, prompt_len = input_ids.shape
        max_len = prompt_len + max_new_tokens
        # with prefix views, one spare slot (never valid, never read): every view is a strict
        # prefix, so the keys and mask attention sees have one layout (one compiled graph)
        slots = max_len + (1 if kv_block else 0)
        cache = StaticCache(config=self.model.config, max_cache_len=slots)
        stops = torch.tensor(list(stop_ids) or [-1], device=self.device)
        mask = attention_mask.to(self.device)
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        # the state every step reads and updates in place
        tokens = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long, device=self.device)
        done = torch.zeros(batch, dtype=torch.bool, device=self.device)
        written = torch.zeros(1, dtype=torch.long, device=self.device)  # new tokens so far
        pad = torch.full((batch,), pad_id, dtype=torch.long, device=self.device)
        step_ids = torch.zeros((batch, 1), dtype=torch.long, device=self.device)
        step_pos = positions[:, -1:].clone()
        key_valid = torch.zeros((batch, slots), dtype=torch.bool, device=self.device)
        key_valid[:, :prompt_len] = mask.bool()
        noise = None  # the exponential race's E_i, a buffer the size of the logits

        def emit(drawn) -> None:
            """Advance the state by each row's drawn token (no host sync)."""
            next_ids = torch.where(done, pad, drawn)
            tokens.index_copy_(1, written, next_ids[:, None])
            # not torch.isin: past ~20 stop ids it sorts and calls unique, which syncs (no capture)
            done.logical_or_((next_ids[:, None] == stops).any(-1))
            step_ids.copy_(next_ids[:, None])
            step_pos.add_(1)
            key_valid.index_fill_(1, written + prompt_len, True)  # the slot this token's keys go to
            written.add_(1)

        def step(view: int) -> None:
            with self._layers_compiled():
                logits = self._forward(cache, input_ids=step_ids, position_ids=step_pos,
                                       attention_mask=key_valid[:, None, None, :view])
            emit(draw_tokens(logits, temperature, top_p, noise))

        graphs: dict = {}  # prefix length -> the captured step at the current batch size
        retired = []  # graphs of earlier batch sizes, alive until the end (their pool is shared)
        pool = torch.cuda.graph_pool_handle() if self.use_graph else None
        side = torch.cuda.Stream() if self.use_graph else None
        rows = torch.arange(batch)  # the caller's row of each row decoded now
        out = None  # the caller's rows, once compaction has dropped some
        reported = torch.zeros(batch, dtype=torch.bool)  # by the caller's row
        stop_set = set(stop_ids)
        warm_until = self.WARMUP
        warmed: set = set()  # compiled: prefix lengths stepped eagerly at this batch size (compiling there)
        with torch.no_grad():
            logits = self._forward(cache, input_ids=input_ids.to(self.device), attention_mask=mask,
                                   position_ids=positions)
            if temperature > 0:
                noise = torch.empty(logits.shape, device=self.device).exponential_()
            emit(draw_tokens(logits, temperature, top_p, noise))
            emitted = 1
            while True:
                if emitted % self.CHECK_EVERY == 0 or emitted == max_new_tokens:
                    finished = done.cpu()  # one device sync per check
                    if on_finished is not None:
                        self._report(tokens[:, :emitted], finished & ~reported[rows], stop_set,
                                     lambda row, ids: on_finished(int(rows[row]), ids))
                        reported[rows[finished]] = True
                    if emitted == max_new_tokens or bool(finished.all()):
                        break
                    live = (~finished).nonzero().flatten()
                    if (self.compact and len(live) <= len(rows) // 2 and len(rows) >= self.COMPACT_MIN_ROWS
                            and max_new_tokens - emitted >= 2 * self.CHECK_EVERY):
                        # finished rows leave the batch: their tokens to `out`, the rest of the state
                        # and the cache cut to the live rows; steps at the new size get new graphs
                        out = tokens.clone() if out is None else out.index_copy_(0, rows.to(self.device), tokens)
                        # at least 2 rows (a finished one decodes padding beside the last live
                        # row): a batch of 1 is a new specialisation, a recompile of every layer
                        live = torch.cat([live, finished.nonzero().flatten()[: max(0, 2 - len(live))]])
                        keep = live.to(self.device)
                        tokens, done, pad, step_ids, step_pos, key_valid = (
                            t.index_select(0, keep) for t in (tokens, done, pad, step_ids, step_pos, key_valid))
                        noise = noise[: len(live)] if noise is not None else None
                        for layer in cache.layers:
                            layer.keys = layer.keys.index_select(0, keep)
                            layer.values = layer.values.index_select(0, keep)
                        rows = rows[live]
                        retired.extend(graphs.values())
                        graphs.clear()
                        warm_until = emitted + self.WARMUP
                        warmed.clear()
                view = self._view(prompt_len + emitted, max_len, kv_block)
                if noise is not None:
                    noise.exponential_()
                if view in graphs:
                    graphs[view].replay()
                elif self.use_graph and emitted > warm_until and (view in warmed or not self.compiled):
                    torch.cuda.current_stream().wait_stream(side)
                    graph = torch.cuda.CUDAGraph()
                    try:
                        with torch.cuda.graph(graph, pool=pool):  # records only: the step runs at the replay
                            step(view)
                    except Exception as err:  # a step that cannot be captured: decode eagerly
                        log.warning("CUDA graph capture failed (%r, in the step: %r); decoding without graphs",
                                    err, err.__context__)
                        self.use_graph, side = False, None
                        step(view)
                    else:
                        graphs[view] = graph
                        graph.replay()
                else:
                    if side is not None:
                        side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                        try:
                            step(view)
                        except torch._dynamo.exc.TorchDynamoException as err:
                            if not self.compiled:
                                raise
                            # raised while compiling, before the step touched any state: decode uncompiled
                            log.warning("torch.compile of the decode step failed (%r); decoding uncompiled", err)
                            self.compiled = False
                            step(view)
                    warmed.add(view)
                    if side is not None:
                        torch.cuda.current_stream().wait_stream(side)
                emitted += 1
        if out is not None:
            tokens = out.index_copy_(0, rows.to(self.device), tokens)
        tokens = tokens[:, :emitted]
        first_stop = (tokens[..., None] == stops).any(-1).int()
        has_stop = first_stop.any(-1)
        lengths = torch.where(has_stop, first_stop.argmax(-1) + 1, torch.full_like(has_stop, emitted, dtype=torch.long))
        tokens, lengths = tokens.cpu(), lengths.cpu()
        if on_finished is not None:
            for row in (~reported).nonzero().flatten().tolist():
                on_finished(row, tokens[row, : int(lengths[row])].tolist())
        return tokens, lengths

    @staticmethod
    def _report(tokens, fresh, stops: set, on_finished) -> None:
        """on_finished(row, ids up to and including the first stop id) for each `fresh` row."""
        rows = fresh.nonzero().flatten().tolist()
        if not rows:
            return
        for row, ids in zip(rows, tokens[rows].cpu().tolist()):
            end = next(i for i, token in enumerate(ids) if token in stops)
            on_finished(row, ids[: end + 1])


def _static_sampler(model_dir, tasks, todo, *, temperature, top_p, max_new_tokens, batch_size, seed, device, dtype):
    """Yields (task_id, sample_id, text, new tokens) with StaticDecoder: the pending samples
    of all tasks, `batch_size` left-padded prompts at a time, seeded like `generate`."""
    import torch

    from chorus.modeling import load_model_and_tokenizer

    device = resolve_device(device)
    batch_size = batch_size or (128 if device.startswith("cuda") else 8)
    model, tokenizer = load_model_and_tokenizer(model_dir, device, dtype)
    model.eval()
    tokenizer.padding_side = "left"
    decoder = StaticDecoder(model)
    stop_ids = _stop_ids(tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (stop_ids or [0])[0]
    prompts = {t.id: render_prompt(tokenizer, build_prompt(t)) for t in tasks}
    pending = [(t.id, i) for t in tasks for i in todo[t.id]]
    for chunk in range(0, len(pending), batch_size):
        items = pending[chunk : chunk + batch_size]
        inputs = tokenizer([prompts[task_id] for task_id, _ in items], return_tensors="pt", padding=True,
                           add_special_tokens=False)
        torch.manual_seed(_chunk_seed(seed, *items[0]))
        tokens, lengths = decoder.generate(inputs["input_ids"], inputs["attention_mask"],
                                           max_new_tokens=max_new_tokens, temperature=temperature,
                                           top_p=top_p if temperature > 0 else None, stop_ids=stop_ids,
                                           pad_id=pad_id)
        for (task_id, sample_id), row, length in zip(items, tokens, lengths):
            row = row[: int(length)]
            yield task_id, sample_id, tokenizer.decode(row, skip_special_tokens=True), int(length)


def _vllm_sampler(model_dir, tasks, todo, *, temperature, top_p, max_new_tokens, batch_size, seed, device, dtype):
    """Yields (task_id, sample_id, text, new tokens) with vLLM (all prompts at once)."""
    try:
        from vllm import LLM, SamplingParams
    except ImportError as err:
        raise RuntimeError("sampler vllm needs the vllm package on a GPU machine") from err
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
