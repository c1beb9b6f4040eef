"""Models built locally, never downloaded: the tiny default and config-shaped models.

The embedded default is a random-init causal LM (Llama, or Qwen2/Qwen3) with a byte-level BPE
tokenizer trained on the shipped task text, saved with `save_pretrained` (safetensors)
so TRL, transformers and mergekit treat it like any Hugging Face checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from chorus.io import atomic_dir
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


ARCHITECTURES = ("llama", "qwen2", "qwen3")
# Config shapes of public checkpoints, for random-init throughput runs (no weights).
SHAPES = {
    "qwen2.5-0.5b": dict(architecture="qwen2", hidden_size=896, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
                         max_position_embeddings=32768, tie_word_embeddings=True),
    "qwen2.5-1.5b": dict(architecture="qwen2", hidden_size=1536, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960,
                         max_position_embeddings=32768, tie_word_embeddings=True),
}
# Short names accepted in a shape dict, mapped to the transformers config fields.
_SHAPE_ALIASES = {
    "hidden": "hidden_size",
    "layers": "num_hidden_layers",
    "num_layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "num_heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "num_kv_heads": "num_key_value_heads",
    "intermediate": "intermediate_size",
    "max_position": "max_position_embeddings",
}


def build_tiny_model(
    out_dir: str | Path,
    corpus: list[str],
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int | None = None,
    intermediate_size: int | None = None,
    vocab_size: int = 1024,
    max_position_embeddings: int = 2048,
    architecture: str = "llama",
    seed: int = 0,
) -> Path:
    """Train a byte-level BPE tokenizer on `corpus`, build a random-init causal LM
    (`architecture`: llama | qwen2 | qwen3) for it and save both to `out_dir`
    (safetensors, atomically). Deterministic given the corpus and `seed`."""
    shape = {
        "architecture": architecture,
        "hidden_size": hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads or num_heads,
        "intermediate_size": intermediate_size or 4 * hidden_size,
        "max_position_embeddings": max_position_embeddings,
    }
    tokenizer = train_tokenizer(corpus, vocab_size)
    tokenizer.model_max_length = max_position_embeddings
    return build_model(out_dir, tokenizer, shape, seed=seed)


def model_config(tokenizer, shape: dict):
    """A transformers config for `shape` (config fields, or the short aliases hidden,
    layers, heads, kv_heads, intermediate; `architecture` picks the model class)."""
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    shape = {_SHAPE_ALIASES.get(k, k): v for k, v in shape.items()}
    architecture = shape.pop("architecture", shape.pop("model_type", "llama"))
    classes = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}
    if architecture not in classes:
        raise ValueError(f"unknown architecture {architecture!r} (one of {ARCHITECTURES})")
    shape.setdefault("tie_word_embeddings", False)
    if architecture == "qwen3":
        shape.setdefault("head_dim", shape["hidden_size"] // shape["num_attention_heads"])
    return classes[architecture](
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **shape,
    )


def build_model(out_dir: str | Path, tokenizer, shape: dict, *, seed: int = 0, dtype=None) -> Path:
    """Random-init causal LM of `shape` for `tokenizer`, saved atomically to `out_dir`."""
    import torch
    from transformers import AutoModelForCausalLM

    config = model_config(tokenizer, dict(shape))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    if dtype is not None:
        model = model.to(dtype)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    save_model_atomically(model, tokenizer, out_dir)
    return Path(out_dir)


def build_model_from_shape(
    out_dir: str | Path, shape: dict | str, tokenizer_dir: str | Path, *, seed: int = 0, dtype="bfloat16"
) -> Path:
    """A larger random-init model reusing a local tokenizer, for GPU throughput runs where
    only the architecture matters. `shape`: a SHAPES name (e.g. "qwen2.5-1.5b") or a dict
    of config fields / aliases, with an optional `architecture` (default llama)."""
    import torch

    if isinstance(shape, str):
        shape = SHAPES[shape]
    tokenizer = load_tokenizer(tokenizer_dir)
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    return build_model(out_dir, tokenizer, dict(shape), seed=seed, dtype=dtype)


def save_model_atomically(model, tokenizer, out_dir: str | Path) -> None:
    """save_pretrained into a sibling temp folder, then rename: a killed job never
    leaves a folder that looks like a complete checkpoint."""
    with atomic_dir(out_dir) as staging:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)


def load_tokenizer(path: str | Path):
    """The tokenizer saved in `path`. A tokenizer saved as a plain tokenizers backend
    (ours) is loaded as such: AutoTokenizer in transformers 5 would swap in the model
    type's tokenizer class for some types (qwen2 -> Qwen2Tokenizer, which re-splits
    digits and adds an <|endoftext|> token beyond the model's vocabulary)."""
    import json

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config_path = Path(path) / "tokenizer_config.json"
    declared = json.loads(config_path.read_text()).get("tokenizer_class") if config_path.is_file() else None
    if declared in ("TokenizersBackend", "PreTrainedTokenizerFast"):
        return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model_and_tokenizer(path: str | Path, device: str | None = None, dtype=None):
    """(model, tokenizer) from a local folder; device defaults to cuda when available,
    dtype to bfloat16 on cuda and float32 on cpu."""
    import torch
    from transformers import AutoModelForCausalLM

    device = device or default_device()
    if dtype is None:
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    return model, tokenizer
