"""Models built locally, never downloaded: the tiny default and config-shaped models.

The embedded default is a random-init Llama-architecture causal LM with a byte-level BPE
tokenizer trained on the shipped task text, saved with `save_pretrained` (safetensors)
so TRL, transformers and mergekit treat it like any Hugging Face checkpoint.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from chorus.prompts import build_prompt, format_completion
from chorus.tasks import Task

SPECIAL_TOKENS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
# A minimal chat template: role markers, the assistant turn ends with <|end|> + eos.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{{ message['content'] + '<|end|>' + eos_token }}"
    "{% endgeneration %}{% else %}{{ message['content'] + '<|end|>\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def task_corpus(tasks: list[Task]) -> list[str]:
    """Text the tokenizer is trained on: prompts (spec + RTL) and stimulus answers."""
    corpus = []
    for task in tasks:
        corpus += [m["content"] for m in build_prompt(task)]
        for path in (task.reference_stimulus, task.trivial_stimulus):
            if path is not None:
                corpus.append(format_completion(path.read_text()))
    return corpus


def train_tokenizer(corpus: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        additional_special_tokens=SPECIAL_TOKENS[3:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(
    out_dir: str | Path,
    corpus: list[str],
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    vocab_size: int = 1024,
    max_position_embeddings: int = 2048,
    seed: int = 0,
) -> Path:
    """Train the tokenizer on `corpus`, build a random-init Llama model, save both."""
    shape = {
        "hidden_size": hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_heads,
        "intermediate_size": 4 * hidden_size,
        "max_position_embeddings": max_position_embeddings,
    }
    return build_model(out_dir, train_tokenizer(corpus, vocab_size), shape, seed=seed)


def build_model(out_dir: str | Path, tokenizer, shape: dict, *, seed: int = 0, dtype=None) -> Path:
    """Random-init LlamaForCausalLM of `shape` (config fields) for `tokenizer`, saved
    atomically to `out_dir`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=shape.pop("tie_word_embeddings", False),
        **shape,
    )
    model = LlamaForCausalLM(config)
    if dtype is not None:
        model = model.to(dtype)
    save_model_atomically(model, tokenizer, out_dir)
    return Path(out_dir)


def build_model_from_shape(out_dir: str | Path, shape: dict, tokenizer_dir: str | Path, seed: int = 0):
    """A larger random-init model (e.g. a Qwen2.5-1.5B-like shape) reusing a local
    tokenizer: for GPU throughput runs where only the architecture matters."""
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    return build_model(out_dir, tokenizer, dict(shape), seed=seed, dtype=torch.bfloat16)


def save_model_atomically(model, tokenizer, out_dir: str | Path) -> None:
    """save_pretrained into a sibling temp folder, then rename: a killed job never
    leaves a folder that looks like a complete checkpoint."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def load_model_and_tokenizer(path: str | Path, device: str = "cpu", dtype=None):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype is None:
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    return model, tokenizer
