"""How fast does the from-scratch tiny student learn to copy facts from its prompt? A wall-clock-matched SFT sweep.

    .venv/bin/python benchmarks/sft_copy_sweep.py --accepted runs/tiny/rft/accepted.jsonl [--minutes 4]
        [--only adamw_cosine,muon_wsd,muon_wsd_grounded4]

The stage-1 student fails when it writes facts from its training prior instead of the product docs in its
prompt (see README, "Stage 1"). Each setting trains a fresh student for the same wall time on the accepted
traces (completion-only loss + router aux loss; AdamW or Muon; warm-up then cosine or warmup-stable-decay;
optionally a larger loss weight on tokens copied from the prompt) and is scored teacher-forced on the error-free
scripted teacher's traces for the first 200 test tasks (unseen products):

- ``token_acc``: next-token accuracy over the completion;
- ``copy_acc``: the same over completion tokens that occur in the prompt and are not among the 300 most common
  completion tokens: product names, colours, materials (digits are too common to count);
- key lookups, the first token after ``Product:`` (the brand, looked up in the question), ``Stock:``
  (the colour), the stock count, ``Unit price:`` (first digit, from the product's doc) and ``Answer:``. The
  student learns each of them in a sudden "phase transition"; a setting is better when they come sooner.

A short diagnostic loop, not the product's trainer (``livethink rft`` uses TRL's SFTTrainer): it exists to pick
the stage-1 settings. Writes ``benchmarks/results/sft_copy_sweep.{json,md}``.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import random
import re
import time
from pathlib import Path

import torch

from livethink.data.io import read_tasks
from livethink.data.prompt import build_messages
from livethink.models.student import StudentConfig, create_student
from livethink.models.tokenizer import load_tokenizer
from livethink.rft_distill.muon import MuonAdamW
from livethink.rft_distill.teachers.base import SamplingConfig
from livethink.rft_distill.teachers.scripted import ScriptedTeacher
from livethink.rft_distill.token_weights import grounded_token_weights, instruction_token_ids

ROOT = Path(__file__).resolve().parents[1]
Pair = tuple[list[int], list[int]]  # prompt ids, completion ids
KEYS = {"product": r"\nProduct: (\S+)", "stock_colour": r"\nStock: (\S+)", "stock_count": r"\nStock: [^\n]*?: (\d+|sold)",
        "unit_price": r"\nUnit price: (\d)", "answer": r"\nAnswer: (\S)"}

# name -> overrides of BASE
SETTINGS: dict[str, dict] = {
    "adamw_cosine": {"lr": 4e-3},  # the stage-1 recipe until session 3
    "muon_wsd": {"lr": 4e-3, "muon": True, "schedule": "wsd"},
    "muon_wsd_grounded4": {"lr": 4e-3, "muon": True, "schedule": "wsd", "grounded_weight": 4.0},  # configs/tiny/rft.yaml
    "base": {},
    "lr8e-3": {"lr": 8e-3},
    "full_seq_loss": {"prompt_loss_weight": 1.0},
    "batch8": {"batch": 8, "lr": 1.5e-3},
    "heads8": {"lr": 4e-3, "heads": 8, "kv_heads": 4},
    "hidden192": {"lr": 4e-3, "hidden": 192, "heads": 6, "moe": 384},
}
BASE = {"hidden": 128, "layers": 4, "heads": 4, "kv_heads": 2, "moe": 256, "lr": 2e-3, "batch": 16,
        "prompt_loss_weight": 0.0, "warmup_steps": 30, "aux": 0.01, "muon": False, "schedule": "cosine",
        "grounded_weight": 1.0, "decay_fraction": 0.25}


def encode(tokenizer, task, completion: str, end_id: int) -> Pair:
    prompt = tokenizer.apply_chat_template(build_messages(task), add_generation_prompt=True, tokenize=True,
                                           return_dict=True)["input_ids"]
    return list(prompt), tokenizer(completion, add_special_tokens=False).input_ids + [end_id]


def key_positions(tokenizer, prompt_len: int, completion: str) -> list[tuple[str, int]]:
    """(key, position in prompt+completion) of the first token of each key lookup in a completion."""
    offsets = tokenizer(completion, add_special_tokens=False, return_offsets_mapping=True).offset_mapping
    found = []
    for key, pattern in KEYS.items():
        for m in re.finditer(pattern, completion):
            j = next(i for i, (a, b) in enumerate(offsets) if a <= m.start(1) < b or a >= m.start(1))
            found.append((key, prompt_len + j))
    return found


def lr_factor(schedule: str, step: int, warmup: int, elapsed_fraction: float, decay_fraction: float) -> float:
    warm = min(1.0, (step + 1) / warmup)
    if schedule == "wsd":
        return warm * min(1.0, max(0.0, (1.0 - elapsed_fraction) / decay_fraction))
    return warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * elapsed_fraction)))


def batchify(pairs: list[Pair], pad_id: int, prompt_weight: float):
    length = max(len(p) + len(c) for p, c in pairs)
    ids = torch.full((len(pairs), length), pad_id)
    attention = torch.zeros(len(pairs), length, dtype=torch.long)
    weights = torch.zeros(len(pairs), length)
    for i, (p, c) in enumerate(pairs):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        attention[i, : len(p) + len(c)] = 1
        weights[i, len(p): len(p) + len(c)] = 1.0
        weights[i, 1: len(p)] = prompt_weight
    return ids, attention, weights


@torch.no_grad()
def score(model, test: list[Pair], keys: list[list[tuple[str, int]]], common: set[int], pad_id: int) -> dict[str, float]:
    model.eval()
    tokens = hits = copy_tokens = copy_hits = 0
    key_hits: collections.Counter = collections.Counter()
    key_counts: collections.Counter = collections.Counter()
    for start in range(0, len(test), 25):
        chunk = test[start: start + 25]
        ids, attention, _ = batchify(chunk, pad_id, 0.0)
        pred = model(input_ids=ids, attention_mask=attention).logits[:, :-1].argmax(-1)
        for b, (p, c) in enumerate(chunk):
            for key, pos in keys[start + b]:
                key_counts[key] += 1
                key_hits[key] += int(pred[b, pos - 1].item() == ids[b, pos].item())
            in_prompt = set(p)
            for j in range(len(p) - 1, len(p) + len(c) - 1):
                target = ids[b, j + 1].item()
                hit = pred[b, j].item() == target
                tokens, hits = tokens + 1, hits + hit
                if target in in_prompt and target not in common:
                    copy_tokens, copy_hits = copy_tokens + 1, copy_hits + hit
    model.train()
    return {"token_acc": hits / tokens, "copy_acc": copy_hits / max(copy_tokens, 1),
            **{f"key_{k}": key_hits[k] / key_counts[k] for k in KEYS if key_counts[k]}}


def train_one(name: str, s: dict, train: list[Pair], test: list[Pair], keys: list, common: set[int], tokenizer,
              minutes: float) -> dict:
    torch.manual_seed(0)
    rng = random.Random(0)
    config = StudentConfig(num_hidden_layers=s["layers"], hidden_size=s["hidden"], num_attention_heads=s["heads"],
                           num_key_value_heads=s["kv_heads"], head_dim=s["hidden"] // s["heads"],
                           moe_intermediate_size=s["moe"], router_aux_loss_coef=s["aux"])
    model = create_student(config, tokenizer)
    if s["muon"]:
        optimizer = MuonAdamW(model.named_parameters(), lr=s["lr"], weight_decay=0.01, betas=(0.9, 0.95))
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], weight_decay=0.01, betas=(0.9, 0.95))
    fixed_ids = instruction_token_ids(tokenizer)
    curve = []
    order = sorted(range(len(train)), key=lambda i: len(train[i][0]) + len(train[i][1]))
    batches = [order[i: i + s["batch"]] for i in range(0, len(order), s["batch"])]
    budget, step, start = minutes * 60, 0, time.perf_counter()
    while time.perf_counter() - start < budget:
        rng.shuffle(batches)
        for batch in batches:
            elapsed = time.perf_counter() - start
            if elapsed >= budget:
                break
            factor = lr_factor(s["schedule"], step, s["warmup_steps"], elapsed / budget, s["decay_fraction"])
            for group in optimizer.param_groups:
                group["lr"] = s["lr"] * factor
            ids, attention, weights = batchify([train[i] for i in batch], tokenizer.pad_token_id,
                                               s["prompt_loss_weight"])
            if s["grounded_weight"] != 1.0:
                labels = torch.where(weights > 0, ids, torch.full_like(ids, -100))
                weights = weights * grounded_token_weights(ids, labels, attention, fixed_ids, s["grounded_weight"])
            out = model(input_ids=ids, attention_mask=attention, output_router_logits=True)
            nll = torch.nn.functional.cross_entropy(out.logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
            loss = (nll * weights[:, 1:]).sum() / weights[:, 1:].sum() + s["aux"] * out.aux_loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step % 100 == 0:
                curve.append({"step": step, "s": round(time.perf_counter() - start),
                              **score(model, test, keys, common, tokenizer.pad_token_id)})
                print(json.dumps({"setting": name, **curve[-1]}), flush=True)
    result = {"setting": name, **s, "steps": step, "train_s": round(time.perf_counter() - start, 1),
              **score(model, test, keys, common, tokenizer.pad_token_id), "curve": curve}
    print(json.dumps(result), flush=True)
    return result


def render_markdown(meta: dict, results: list[dict]) -> str:
    """The Markdown report: final scores per setting, and the first checkpoint at which each lookup is >= 90%."""
    rows = [f"| {r['setting']} | {'Muon+AdamW' if r['muon'] else 'AdamW'} | {r['schedule']} | {r['grounded_weight']:g} | "
            f"{r['lr']:g} | {r['batch']} | {r['hidden']} | {r['steps']} | {r['token_acc']:.1%} | {r['copy_acc']:.1%} | "
            + " | ".join(f"{r.get('key_' + k, float('nan')):.0%}" for k in KEYS) + " |" for r in results]
    first = [f"| {r['setting']} | " + " | ".join(
        str(next((c["step"] for c in [*r["curve"], {**r, "step": r["steps"]}] if c.get("key_" + k, 0) >= 0.9), "-"))
        for k in KEYS) + " |"
        for r in results]
    return "\n".join([
        "# SFT copy sweep (tiny student, wall-clock matched)", "",
        f"{meta['train_sequences']} accepted traces from `{meta['accepted']}`, {meta['minutes_per_setting']:g} min per "
        f"setting, {meta['threads']} threads, load {meta['load_avg'][0]:.1f}. Scored teacher-forced on 200 test tasks.", "",
        "| setting | optimizer | schedule | grounded weight | lr | batch | hidden | steps | token acc | copy acc | "
        + " | ".join(f"{k} lookup" for k in KEYS) + " |",
        "|---" * (10 + len(KEYS)) + "|", *rows, "",
        "First step (100-step checkpoints, then the last step) at which each key lookup is >= 90% right (- = never):",
        "", "| setting | " + " | ".join(KEYS) + " |", "|---" * (1 + len(KEYS)) + "|", *first, ""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accepted", type=Path, default=ROOT / "runs/tiny/rft/accepted.jsonl")
    ap.add_argument("--data-dir", type=Path, default=ROOT / "artifacts/tiny/data")
    ap.add_argument("--tokenizer", type=Path, default=ROOT / "artifacts/tiny/tokenizer")
    ap.add_argument("--minutes", type=float, default=4.0, help="wall-clock training budget per setting")
    ap.add_argument("--only", default=",".join(SETTINGS), help="comma-separated setting names")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    ap.add_argument("--render-only", action="store_true", help="rewrite the Markdown from the existing JSON")
    args = ap.parse_args()
    if args.render_only:
        saved = json.loads((args.out / "sft_copy_sweep.json").read_text())
        (args.out / "sft_copy_sweep.md").write_text(render_markdown(saved["meta"], saved["results"]))
        return
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise SystemExit(f"--only: unknown setting(s) {unknown}; known: {sorted(SETTINGS)}")
    if not args.accepted.is_file():
        raise SystemExit(f"--accepted {args.accepted} not found: run `livethink rft --config configs/tiny/rft.yaml`")

    tokenizer = load_tokenizer(args.tokenizer)
    end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    tasks = {t.id: t for t in read_tasks(args.data_dir / "train.jsonl")}
    records = [json.loads(line) for line in args.accepted.open()]
    train = [encode(tokenizer, tasks[r["task_id"]], r["completion"], end_id) for r in records]
    teacher = ScriptedTeacher(error_rate=0.0)
    test, keys = [], []
    for task in read_tasks(args.data_dir / "test.jsonl")[:200]:
        completion = teacher.sample(task, 0, SamplingConfig(temperature=0.0)).completion
        test.append(encode(tokenizer, task, completion, end_id))
        keys.append(key_positions(tokenizer, len(test[-1][0]), completion))
    common = {tok for tok, _ in collections.Counter(x for _, c in train for x in c).most_common(300)}

    results = [train_one(n, {**BASE, **SETTINGS[n]}, train, test, keys, common, tokenizer, args.minutes) for n in names]
    meta = {"accepted": str(args.accepted), "train_sequences": len(train), "minutes_per_setting": args.minutes,
            "threads": torch.get_num_threads(), "load_avg": os.getloadavg(), "machine": platform.processor()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sft_copy_sweep.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    (args.out / "sft_copy_sweep.md").write_text(render_markdown(meta, results))


if __name__ == "__main__":
    main()
