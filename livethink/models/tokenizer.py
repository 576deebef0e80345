"""Byte-level BPE tokenizer for the student, trained on the corpus, with a Qwen3-style ChatML template.

Layout of the vocabulary: ids 0-2 are ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos); then the
byte alphabet and the learned merges; the last two ids are ``<think>`` and ``</think>``. The think tags are
added tokens that are *not* special, as in Qwen3: ``decode(..., skip_special_tokens=True)`` keeps them, so the
reasoning parser (vLLM's ``qwen3``, our rewards) still sees where thinking ends.

Pre-tokenization follows Qwen2/3: a regex split that puts every digit in its own piece (so "$1,299.00" is
``$ 1 , 2 9 9 . 0 0``: arithmetic-friendly and lossless), then byte-level encoding.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START, IM_END)
THINK_TOKENS: tuple[str, ...] = (THINK_OPEN, THINK_CLOSE)

# Qwen2/Qwen3 pre-tokenizer pattern: contractions, words, single digits, punctuation runs, newlines, spaces.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# ChatML as in Qwen3: `<|im_start|>{role}\n{content}<|im_end|>\n`. Assistant content is rendered verbatim (the
# completion carries its own `<think>\n...\n</think>\n\n`). `{% generation %}` marks the assistant span, end-of-turn
# token included, so TRL's `assistant_only_loss=True` works; the prompt renders identically alone and followed by
# the completion (prefix-preserving), which TRL's prompt-completion path relies on. `enable_thinking=false` (a
# Qwen3 chat-template kwarg) pre-fills an empty think block.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}{{- message['content'] + '<|im_end|>\\n' }}{%- endgeneration %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def _base_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 4096,
    min_frequency: int = 2,
    model_max_length: int = 2048,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts`` and wrap it as a HF fast tokenizer with the chat template.

    ``vocab_size`` counts everything (special tokens, byte alphabet, merges, think tags); training may stop
    short of it on a small corpus. The result is ready for ``save_pretrained`` (see :func:`save_tokenizer`).
    """
    reserved = len(SPECIAL_TOKENS) + len(THINK_TOKENS)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < reserved + len(alphabet):
        raise ValueError(f"vocab_size={vocab_size} must be >= {reserved + len(alphabet)} (byte alphabet + special tokens)")
    tok = _base_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(THINK_TOKENS),
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator((t for t in texts if t), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return wrap_tokenizer(tok, model_max_length=model_max_length)


def wrap_tokenizer(tok: Tokenizer, model_max_length: int = 2048) -> PreTrainedTokenizerFast:
    """Wrap a raw ``tokenizers.Tokenizer`` with our special tokens and chat template."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=model_max_length,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, out_dir: str | Path) -> Path:
    """Save as a HF tokenizer directory (``tokenizer.json``, ``tokenizer_config.json``, chat template).

    The class is recorded as ``PreTrainedTokenizerFast`` (transformers 5 writes ``TokenizersBackend``, which
    transformers 4.x, used by some vLLM builds, does not know); both load the same ``tokenizer.json``.
    """
    import json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    config_file = out / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return out


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer directory saved by :func:`save_tokenizer` (or any HF tokenizer directory)."""
    from transformers import AutoTokenizer

    path = Path(path)
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        raise FileNotFoundError(f"no tokenizer at {path} (expected tokenizer.json / tokenizer_config.json)")
    return AutoTokenizer.from_pretrained(str(path))


def check_tokenizer(tokenizer: PreTrainedTokenizerFast) -> None:
    """Raise ``ValueError`` if the tokenizer lacks what the student, TRL and vLLM rely on."""
    vocab = tokenizer.get_vocab()
    for token in SPECIAL_TOKENS + THINK_TOKENS:
        if token not in vocab:
            raise ValueError(f"tokenizer lacks the token {token!r}")
    for token in THINK_TOKENS:
        ids = tokenizer.encode(token, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"{token!r} must encode to one token, got {ids}")
    if tokenizer.eos_token != IM_END or tokenizer.pad_token != PAD_TOKEN:
        raise ValueError(f"eos/pad must be {IM_END!r}/{PAD_TOKEN!r}, got {tokenizer.eos_token!r}/{tokenizer.pad_token!r}")
    if not tokenizer.chat_template:
        raise ValueError("tokenizer has no chat_template")


def corpus_from_tasks(tasks: Iterable) -> Iterator[str]:
    """Texts of LiveShop task records for tokenizer training: system prompt + docs, dialogue, question, facts.

    Each message is prefixed with its role as the chat template lays it out, so role names become single
    tokens. Assistant-side text (teacher traces) can be appended by the caller; the helpful facts and the docs
    already carry the reply vocabulary (prices, sizes, policies).
    """
    from livethink.data.prompt import build_messages

    for task in tasks:
        for message in build_messages(task):
            yield f"{message['role']}\n{message['content']}"
        yield "assistant\n"  # the generation prompt every example ends with
        for fact in task.helpful_facts:
            yield fact.fact


def texts_from_file(path: str | Path) -> Iterator[str]:
    """Extra corpus texts: a ``.txt`` file (one text per line) or a JSONL file whose records hold a string
    ``text`` / ``completion`` / ``reasoning`` / ``reply`` field (e.g. teacher samples)."""
    import json

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such corpus file: {path}")
    with path.open(encoding="utf-8") as fh:
        if path.suffix != ".jsonl":
            yield from (line.rstrip("\n") for line in fh if line.strip())
            return
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {lineno}: invalid JSON ({exc})") from exc
            for key in ("text", "completion", "reasoning", "reply"):
                if isinstance(record.get(key), str):
                    yield record[key]
