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
import types
import weakref
import zlib
from pathlib import Path

from chorus.io import Progress
from chorus.journal import Journal, journal_path
from chorus.prompts import build_prompt, render_prompt
from chorus.settings import Sampling
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
    sampling: Sampling,
    *,
    seed: int = 0,
    device: str | None = None,
    dtype=None,
    conversations: dict[tuple[str, int], list[dict]] | None = None,
) -> dict:
    """Write k completions per task to `out_jsonl`, drawn as `sampling` says (temperature,
    top_p, max_new_tokens, sampler, batch_size), and return statistics (samples,
    new_tokens, seconds, tokens_per_s, resumed). Pending (task, sample) pairs are drawn
    `batch_size` at a time (default 64 on cuda, 8 on cpu), across tasks, left-padded;
    each batch is seeded by (seed, its first task and sample id), so a re-run with the
    same settings and the same pending pairs draws the same samples. device: None = cuda
    (bfloat16) when available, else cpu (float32).
    sampler: auto | generate | continuous | static | vllm (see resolve_sampler; `static`:
    StaticDecoder, a static KV cache whose decode step is replayed from a CUDA graph on a
    GPU, `batch_size` rows per call (default 128 on cuda), each call seeded like a
    batch); `continuous` draws
    `batch_size` requests per engine call (default 1024 on cuda, 16 on cpu) and seeds each
    call like a `generate` batch, so it resumes and repeats the same way.
    conversations: (task id, sample id) -> the chat messages to continue (a later
    coverage-closure round, chorus.rounds); only these samples are drawn, one each, and
    `k` is unused. None: k samples of each task's build_prompt."""
    out_jsonl = Path(out_jsonl)
    out_jsonl.parent.mkdir(parents=True, exist_ok=True)
    journal = Journal(journal_path(out_jsonl), _sample_key)
    resumed = len(journal.done)
    wanted = list(conversations) if conversations is not None else [(t.id, i) for t in tasks for i in range(k)]
    todo: dict[str, list[int]] = {}
    for task_id, sample_id in wanted:
        if (task_id, sample_id) not in journal.done:
            todo.setdefault(task_id, []).append(sample_id)
    start, new_tokens = time.perf_counter(), 0
    sampler = resolve_sampler(sampling.sampler, device)
    if todo:
        draw = {"generate": _hf_sampler, "continuous": _continuous_sampler, "static": _static_sampler,
                "vllm": _vllm_sampler}[sampler]
        progress = Progress("generated samples", sum(len(ids) for ids in todo.values()))
        with journal:
            for task_id, sample_id, text, n_tokens in draw(
                model_dir, [t for t in tasks if t.id in todo], todo,
                temperature=sampling.temperature, top_p=sampling.top_p, max_new_tokens=sampling.max_new_tokens,
                batch_size=sampling.batch_size, seed=seed, device=device, dtype=dtype, conversations=conversations,
            ):
                new_tokens += n_tokens
                journal.append({"task_id": task_id, "sample_id": sample_id, "completion": text,
                                "new_tokens": n_tokens})
                progress.update()
    ordered = [journal.done[key] for key in wanted]
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


def _prompt_texts(tokenizer, tasks, pending, conversations=None) -> list[str]:
    """The rendered prompt of each pending (task id, sample id): its conversation when
    given, else its task's build_prompt (rendered once per task)."""
    if conversations is not None:
        return [render_prompt(tokenizer, conversations[item]) for item in pending]
    per_task = {t.id: render_prompt(tokenizer, build_prompt(t)) for t in tasks}
    return [per_task[task_id] for task_id, _ in pending]


def _stop_ids(tokenizer) -> list[int]:
    """End-of-sequence ids: eos and the chat template's end-of-turn marker when it exists."""
    candidates = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|end|>")}
    return sorted(i for i in candidates if isinstance(i, int) and i >= 0 and i != tokenizer.unk_token_id)


def _hf_sampler(model_dir, tasks, todo, *, temperature, top_p, max_new_tokens, batch_size, seed, device, dtype,
                conversations=None):
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
    pending = [(t.id, i) for t in tasks for i in todo[t.id]]
    texts = _prompt_texts(tokenizer, tasks, pending, conversations)
    for chunk in range(0, len(pending), batch_size):
        items = pending[chunk : chunk + batch_size]
        inputs = tokenizer(texts[chunk : chunk + batch_size], return_tensors="pt",
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
                        dtype, conversations=None):
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
    pending = [(t.id, i) for t in tasks for i in todo[t.id]]
    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"]
               for text in _prompt_texts(tokenizer, tasks, pending, conversations)]
    for chunk in range(0, len(pending), batch_size):
        items = pending[chunk : chunk + batch_size]
        inputs = prompts[chunk : chunk + batch_size]
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
    the output, rows that hit a stop id or their last token marked done, the next key
    position made valid). Everything a step reads and writes lives in fixed buffers updated
    in place, including each row's token count and next cache position (device tensors: a
    row writes its keys at its own position), so replays need nothing from the host but
    the step's random numbers, drawn into a buffer before each replay (no random op in the
    graph: a failed capture cannot leave the generator in capture mode). Attention reads
    only the cache's filled prefix, rounded up to `kv_block` positions (one graph per prefix
    length, captured when decoding reaches it), so a step's cost follows the sequence so
    far rather than prompt + max_new_tokens (`kv_block=None`: the whole cache every step).
    Finished rows would otherwise decode padding until the longest row ends: with fewer
    `slots` than rows, the host looks every CHECK_EVERY steps, and a row that has ended
    gives its slot to the next waiting row (prefilled on its own, its keys copied into the
    slot); once no row waits and at most half the rows are live (`compact`), the finished
    ones leave the batch and the state and cache shrink to the live rows, whose steps get
    graphs of the smaller size. The first `WARMUP` decode steps of a batch size run
    eagerly on a side stream (they are real steps) before its first capture. `compile`:
    decode steps run the model's decoder layers through torch.compile (off by default,
    see __init__)."""

    WARMUP = 3
    KV_BLOCK = 256
    CHECK_EVERY = 16  # steps between the host's looks at finished rows (one sync each)
    COMPACT_MIN_ROWS = 16  # smaller batches are not worth compacting
    # prompt tokens a prefill forward takes at most: 512 rows of a 1,300-token conversation
    # in one prefill ran out of an H100's memory (its attention scores alone 14 GiB)
    PREFILL_TOKENS = 2**17

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
    def _view(filled: int, max_len: int, kv_block: int | None) -> int:
        """Cache positions a decode step reads when `filled` of them are filled."""
        if not kv_block:
            return max_len
        return min(max_len, -(-filled // kv_block) * kv_block)

    def generate(self, input_ids, attention_mask, *, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float | None = None, stop_ids=(), pad_id: int = 0, on_finished=None,
                 slots: int | None = None):
        """New tokens [batch, <= max_new_tokens] for left-padded prompts; after a stop id a
        row holds `pad_id`. Returns (tokens, lengths): lengths count tokens up to and
        including the first stop id. `on_finished(row, ids)` hears of each row once, with
        the ids it returns, within CHECK_EVERY steps of its end (while the rest decode).
        `slots`: rows decoded at once (default: all). With fewer slots than rows the rows
        wait in order, and a slot whose row has ended takes the next one at the next check
        (prefilled on its own): the batch stays full instead of decoding padding for the
        finished rows until the longest row ends."""
        switch = getattr(self.model, "set_attn_implementation", None)
        if switch is None:  # not a transformers model: its own attention reads the whole cache
            return self._generate(input_ids, attention_mask, max_new_tokens, temperature, top_p, stop_ids, pad_id,
                                  on_finished, None, slots)
        previous = self.model.config._attn_implementation
        switch(_register_prefix_attention())
        # a model that keeps its own attention (no dynamic switch) reads the whole cache
        prefix = self.model.config._attn_implementation == PREFIX_ATTENTION
        try:
            return self._generate(input_ids, attention_mask, max_new_tokens, temperature, top_p, stop_ids, pad_id,
                                  on_finished, self.kv_block if prefix else None, slots)
        finally:
            switch(previous)

    @staticmethod
    def _write_per_row(layer, state) -> None:
        """The cache layer's update, made to write each row's one new key and value to
        that row's own position (`state.write_pos`): rows admitted at different steps sit at
        different positions of the cache. The update holds its layer weakly: a closure
        over the layer, set on the layer, is a reference cycle, and the KV cache (tens of
        GiB for a rollout batch) would stay allocated after the run, beside the training
        step, until Python's cyclic collector happened to run."""
        layer_ref = weakref.ref(layer)

        def update(key_states, value_states, *args, **kwargs):
            layer = layer_ref()
            at = state.write_pos.view(-1, 1, 1, 1)
            layer.keys.scatter_(2, at.expand(-1, key_states.shape[1], 1, key_states.shape[3]), key_states)
            layer.values.scatter_(2, at.expand(-1, value_states.shape[1], 1, value_states.shape[3]), value_states)
            return layer.keys, layer.values

        layer.update = update

    def _generate(self, input_ids, attention_mask, max_new_tokens, temperature, top_p, stop_ids, pad_id,
                  on_finished, kv_block, slots):
        with self.torch.no_grad():
            return _DecodeRun(self, input_ids, attention_mask, max_new_tokens, temperature, top_p, stop_ids, pad_id,
                              on_finished, kv_block, slots).run()


class _DecodeRun:
    """One StaticDecoder.generate call: the static cache, the per-slot state every decode
    step reads and updates in place, the host's record of which caller row sits in which
    slot, and the captured step graphs (one per prefix length at the current batch size)."""

    def __init__(self, decoder: StaticDecoder, input_ids, attention_mask, max_new_tokens, temperature, top_p,
                 stop_ids, pad_id, on_finished, kv_block, slots):
        torch = self.torch = decoder.torch
        from transformers import StaticCache
        from transformers.cache_utils import StaticLayer

        self.decoder, self.device = decoder, decoder.device
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.pad_id, self.on_finished, self.kv_block = pad_id, on_finished, kv_block
        self.input_ids, self.attention_mask = input_ids.cpu(), attention_mask.cpu()
        self.rows_total, self.prompt_len = self.input_ids.shape
        width = self.width = min(slots or self.rows_total, self.rows_total)  # rows decoded at once
        self.max_len = self.prompt_len + max_new_tokens  # no row's keys reach past its prompt + its new tokens
        # with prefix views, one spare position (never valid, never read): every view is a strict
        # prefix, so the keys and mask attention sees have one layout (one compiled graph)
        capacity = self.capacity = self.max_len + (1 if kv_block else 0)
        self.cache = StaticCache(config=decoder.model.config, max_cache_len=capacity)
        if not all(isinstance(layer, StaticLayer) and not layer.is_sliding for layer in self.cache.layers):
            raise ValueError("StaticDecoder needs a model whose cache layers all attend to the whole sequence")
        self.stops = torch.tensor(list(stop_ids) or [-1], device=self.device)
        device = self.device
        # the state every step reads and updates in place, one row per slot; `tokens` has
        # one column more, where the rows that have ended write padding
        self.state = types.SimpleNamespace(
            tokens=torch.full((width, max_new_tokens + 1), pad_id, dtype=torch.long, device=device),
            count=torch.zeros(width, dtype=torch.long, device=device),  # the row's tokens so far
            done=torch.ones(width, dtype=torch.bool, device=device),  # an empty slot is done
            pad=torch.full((width,), pad_id, dtype=torch.long, device=device),
            step_ids=torch.zeros((width, 1), dtype=torch.long, device=device),
            step_pos=torch.zeros((width, 1), dtype=torch.long, device=device),
            write_pos=torch.zeros(width, dtype=torch.long, device=device),  # cache position of the next keys
            key_valid=torch.zeros((width, capacity), dtype=torch.bool, device=device),
            noise=None,  # the exponential race's E_i, a buffer the size of the logits
        )
        self.out = torch.full((self.rows_total, max_new_tokens), pad_id, dtype=torch.long)
        self.lengths = torch.zeros(self.rows_total, dtype=torch.long)
        self.slot_row = [-1] * width  # the caller's row in each slot (-1: none, or reported)
        self.ends_by = [0] * width  # the step by which the slot's row has surely ended
        self.write_offset = [0] * width  # the cache position the row writes at step t: at most t + this
        self.admitted = 0  # rows handed to slots so far, in the caller's order
        self.graphs: dict = {}  # prefix length -> the captured step at the current batch size
        self.retired: list = []  # graphs of earlier batch sizes, alive until the end (their pool is shared)
        self.pool = torch.cuda.graph_pool_handle() if decoder.use_graph else None
        self.side = torch.cuda.Stream() if decoder.use_graph else None
        self.warm_until = decoder.WARMUP
        self.warmed: set = set()  # compiled: prefix lengths stepped eagerly at this batch size (compiling there)
        self.steps = self.last_end = self.furthest = 0

    def run(self):
        """Decode until every row has ended; (tokens, lengths) as StaticDecoder.generate."""
        decoder = self.decoder
        while True:
            if self.steps % decoder.CHECK_EVERY == 0 or self.steps >= self.last_end:  # one device sync per check
                if not self.check():
                    break
            view = decoder._view(self.steps + self.furthest + 1, self.max_len, self.kv_block)
            if self.state.noise is not None:
                self.state.noise.exponential_()
            self.decode_step(view)
            self.steps += 1
        return self.out[:, : max(1, int(self.lengths.max()))], self.lengths

    def check(self) -> bool:
        """The host's look: ended rows harvested, free slots refilled, the batch compacted
        when worth it; False once no row is live."""
        self.harvest()
        free = [slot for slot in range(len(self.slot_row)) if self.slot_row[slot] < 0][: self.rows_total - self.admitted]
        if free:
            self.admit(free, list(range(self.admitted, self.admitted + len(free))))
            self.admitted += len(free)
        live = [slot for slot in range(len(self.slot_row)) if self.slot_row[slot] >= 0]
        if not live:
            return False
        self.last_end = max(self.ends_by[slot] for slot in live)
        # the filled prefix the steps until the next check read (rows that have ended
        # meanwhile write no further: an upper bound)
        self.furthest = max(self.write_offset[slot] for slot in live)
        decoder = self.decoder
        if (decoder.compact and self.admitted == self.rows_total and len(live) <= len(self.slot_row) // 2
                and len(self.slot_row) >= decoder.COMPACT_MIN_ROWS
                and self.last_end - self.steps >= 2 * decoder.CHECK_EVERY):
            self.compact(live)
        return True

    def compact(self, live: list[int]) -> None:
        """The ended rows leave the batch (their tokens are in `out`): the state and the
        cache cut to the live rows, whose steps get graphs of the new size. At least 2 rows
        (an empty one decodes padding beside the last live row): a batch of 1 is a new
        specialisation, a recompile of every layer."""
        state = self.state
        keep = live + [slot for slot in range(len(self.slot_row)) if self.slot_row[slot] < 0][: max(0, 2 - len(live))]
        at = self.torch.tensor(keep, device=self.device)
        for name in ("tokens", "count", "done", "pad", "step_ids", "step_pos", "write_pos", "key_valid"):
            setattr(state, name, getattr(state, name).index_select(0, at))
        if state.noise is not None:
            state.noise = state.noise[: len(keep)]
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, at)
            layer.values = layer.values.index_select(0, at)
        self.slot_row, self.ends_by, self.write_offset = (
            [values[slot] for slot in keep] for values in (self.slot_row, self.ends_by, self.write_offset))
        self.retired.extend(self.graphs.values())
        self.graphs.clear()
        self.warm_until = self.steps + self.decoder.WARMUP
        self.warmed.clear()

    def decode_step(self, view: int) -> None:
        """One decode step over the first `view` cache positions: a graph's replay, its
        capture, or an eager step (on the side stream while warming up)."""
        torch, decoder = self.torch, self.decoder
        if view in self.graphs:
            self.graphs[view].replay()
        elif decoder.use_graph and self.steps >= self.warm_until and (view in self.warmed or not decoder.compiled):
            torch.cuda.current_stream().wait_stream(self.side)
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, pool=self.pool):  # records only: the step runs at the replay
                    self.step(view)
            except Exception as err:  # a step that cannot be captured: decode eagerly
                log.warning("CUDA graph capture failed (%r, in the step: %r); decoding without graphs",
                            err, err.__context__)
                decoder.use_graph, self.side = False, None
                self.step(view)
            else:
                self.graphs[view] = graph
                graph.replay()
        else:
            side = self.side
            if side is not None:
                side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                try:
                    self.step(view)
                except torch._dynamo.exc.TorchDynamoException as err:
                    if not decoder.compiled:
                        raise
                    # raised while compiling, before the step touched any state: decode uncompiled
                    log.warning("torch.compile of the decode step failed (%r); decoding uncompiled", err)
                    decoder.compiled = False
                    self.step(view)
            self.warmed.add(view)
            if side is not None:
                torch.cuda.current_stream().wait_stream(side)

    def step(self, view: int) -> None:
        state = self.state
        with self.decoder._layers_compiled():
            logits = self.decoder._forward(self.cache, input_ids=state.step_ids, position_ids=state.step_pos,
                                           attention_mask=state.key_valid[:, None, None, :view])
        self.emit(draw_tokens(logits, self.temperature, self.top_p, state.noise))

    def emit(self, drawn) -> None:
        """Advance every live row by its drawn token (no host sync)."""
        torch, state = self.torch, self.state
        live = ~state.done
        next_ids = torch.where(state.done, state.pad, drawn)
        state.tokens.scatter_(1, state.count[:, None], next_ids[:, None])
        state.count.add_(live)
        # not torch.isin: past ~20 stop ids it sorts and calls unique, which syncs (no capture)
        state.done.logical_or_((next_ids[:, None] == self.stops).any(-1)).logical_or_(
            state.count >= self.max_new_tokens)
        state.step_ids.copy_(next_ids[:, None])
        state.step_pos.add_(live[:, None])
        state.write_pos.add_(live)
        state.key_valid.scatter_(1, state.write_pos[:, None], True)  # the position this token's keys go to

    def admit(self, free: list[int], callers: list[int]) -> None:
        """Prefill the callers' rows into the free slots, in groups of at most
        PREFILL_TOKENS prompt tokens, each group's keys then copied into its slots (the
        cache is made for every slot at the first admission)."""
        torch, state, decoder, cache = self.torch, self.state, self.decoder, self.cache
        max_new_tokens, capacity = self.max_new_tokens, self.capacity
        mask = self.attention_mask[callers]
        own_len = int(mask.sum(-1).max())  # their prompts without the columns only padding fills
        ids, mask = (t[:, self.prompt_len - own_len:].to(self.device) for t in (self.input_ids[callers], mask))
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        at = torch.tensor(free, device=self.device)
        if not cache.layers[0].is_initialized:
            self.initialize_cache()
        group = max(1, decoder.PREFILL_TOKENS // own_len)
        logits = torch.cat([self.prefill_copied(ids[i : i + group], mask[i : i + group], positions[i : i + group],
                                                at[i : i + group]) for i in range(0, len(free), group)])
        drawn = draw_tokens(logits, self.temperature, self.top_p)
        if self.temperature > 0 and state.noise is None:
            state.noise = torch.empty((self.width, logits.shape[-1]), device=self.device)  # drawn before each step
        valid = torch.zeros((len(free), capacity), dtype=torch.bool, device=self.device)
        valid[:, :own_len] = mask.bool()
        valid[:, own_len] = True  # the first new token's keys
        first = torch.full((len(free), max_new_tokens + 1), self.pad_id, dtype=torch.long, device=self.device)
        first[:, 0] = drawn
        state.key_valid.index_copy_(0, at, valid)
        state.tokens.index_copy_(0, at, first)
        state.count.index_fill_(0, at, 1)
        state.done.index_copy_(0, at, (drawn[:, None] == self.stops).any(-1) | (max_new_tokens <= 1))
        state.step_ids.index_copy_(0, at, drawn[:, None])
        state.step_pos.index_copy_(0, at, positions[:, -1:] + 1)
        state.write_pos.index_fill_(0, at, own_len)
        for slot, caller in zip(free, callers):
            self.slot_row[slot] = caller
            self.ends_by[slot] = self.steps + max_new_tokens - 1
            self.write_offset[slot] = own_len - self.steps

    def initialize_cache(self) -> None:
        """The cache's tensors for every slot before any prefill writes into it, each layer
        then writing a decode step's keys at its rows' own positions."""
        config, model = self.decoder.model.config, self.decoder.model
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.cache.early_initialization(self.width, config.num_key_value_heads, head_dim,
                                        next(model.parameters()).dtype, self.device)
        for layer in self.cache.layers:
            self.decoder._write_per_row(layer, self.state)

    def prefill_copied(self, ids, mask, positions, at):
        """The last position's logits of rows prefilled into a cache of their own, whose keys
        and values are then copied into the slots `at` (a prefill's attention grows with
        rows x prompt length squared: a long conversation at a wide batch would not fit)."""
        from transformers import StaticCache

        own_len = ids.shape[1]
        filled = StaticCache(config=self.decoder.model.config, max_cache_len=own_len)
        logits = self.decoder._forward(filled, input_ids=ids, attention_mask=mask, position_ids=positions)
        for layer, new in zip(self.cache.layers, filled.layers):
            layer.keys[:, :, :own_len].index_copy_(0, at, new.keys)
            layer.values[:, :, :own_len].index_copy_(0, at, new.values)
        return logits

    def harvest(self) -> None:
        """The ended rows' tokens to `out` (and on_finished); their slots become free."""
        state = self.state
        ended = [slot for slot, done in enumerate(state.done.cpu().tolist()) if done and self.slot_row[slot] >= 0]
        if not ended:
            return
        at = self.torch.tensor(ended, device=self.device)
        counts = state.count.index_select(0, at).cpu().tolist()
        rows = state.tokens.index_select(0, at).cpu()
        for slot, count, row in zip(ended, counts, rows):
            caller = self.slot_row[slot]
            self.out[caller, :count], self.lengths[caller] = row[:count], count
            self.slot_row[slot] = -1
            if self.on_finished is not None:
                self.on_finished(caller, row[:count].tolist())


def _static_sampler(model_dir, tasks, todo, *, temperature, top_p, max_new_tokens, batch_size, seed, device, dtype,
                    conversations=None):
    """Yields (task_id, sample_id, text, new tokens) with StaticDecoder: the pending samples
    of all tasks, `batch_size` left-padded prompts per call, each call seeded like a
    `generate` batch. One call of all its rows, not slots refilled as rows end
    (`StaticDecoder.generate(slots=)`): on an H100 refilled slots decoded slower than the
    same rows in calls one after another (benchmarks/README.md)."""
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
    pending = [(t.id, i) for t in tasks for i in todo[t.id]]
    texts = _prompt_texts(tokenizer, tasks, pending, conversations)
    for chunk in range(0, len(pending), batch_size):
        items = pending[chunk : chunk + batch_size]
        inputs = tokenizer(texts[chunk : chunk + batch_size], return_tensors="pt", padding=True,
                           add_special_tokens=False)
        torch.manual_seed(_chunk_seed(seed, *items[0]))
        tokens, lengths = decoder.generate(inputs["input_ids"], inputs["attention_mask"],
                                           max_new_tokens=max_new_tokens, temperature=temperature,
                                           top_p=top_p if temperature > 0 else None, stop_ids=stop_ids,
                                           pad_id=pad_id)
        for (task_id, sample_id), row, length in zip(items, tokens, lengths):
            row = row[: int(length)]
            yield task_id, sample_id, tokenizer.decode(row, skip_special_tokens=True), int(length)


def _vllm_sampler(model_dir, tasks, todo, *, temperature, top_p, max_new_tokens, batch_size, seed, device, dtype,
                  conversations=None):
    """Yields (task_id, sample_id, text, new tokens) with vLLM (all prompts at once)."""
    try:
        from vllm import LLM, SamplingParams
    except ImportError as err:
        raise RuntimeError("sampler vllm needs the vllm package on a GPU machine") from err
    from chorus.modeling import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    llm = LLM(model=str(model_dir), seed=seed, dtype=str(dtype or "auto").replace("torch.", ""))
    pending = [(t.id, i) for t in tasks for i in todo[t.id]]
    requests = [(*item, text) for item, text in zip(pending, _prompt_texts(tokenizer, tasks, pending, conversations))]
    params = [SamplingParams(n=1, temperature=temperature, top_p=top_p if temperature > 0 else 1.0,
                             max_tokens=max_new_tokens, seed=_chunk_seed(seed, task_id, sample_id))
              for task_id, sample_id in pending]
    outputs = llm.generate([r[2] for r in requests], params)
    for (task_id, sample_id, _), output in zip(requests, outputs):
        completion = output.outputs[0]
        yield task_id, sample_id, completion.text, len(completion.token_ids)
