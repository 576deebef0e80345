"""LiveShop generator, schema validation and readers/writers."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from livethink.data.io import InvalidTaskError, load_tasks, read_tasks, to_dataset, write_jsonl, write_parquet
from livethink.data.liveshop.catalog import Bundle, Coupon, Product, price_quote
from livethink.data.liveshop.generate import HOLDOUT_SEED, N_HOLDOUT, SPLITS, generate, make_task
from livethink.data.prompt import build_messages, format_completion
from livethink.data.schema import QUESTION_KINDS, Reference, Task


def test_generation_is_deterministic():
    a = generate(seed=3, n_train=50, n_validation=5, n_test=10)
    b = generate(seed=3, n_train=50, n_validation=5, n_test=10)
    assert [t.model_dump() for t in a.tasks["train"]] == [t.model_dump() for t in b.tasks["train"]]
    c = generate(seed=4, n_train=50, n_validation=5, n_test=10)
    assert [t.question for t in a.tasks["train"]] != [t.question for t in c.tasks["train"]]


def test_test_split_uses_unseen_products(liveshop_small):
    products = {s: {pid for t in liveshop_small.tasks[s] for pid in t.product_ids} for s in liveshop_small.tasks}
    assert products["train"] and products["test"]
    assert not products["train"] & products["test"]
    assert not products["train"] & products["validation"]


# SHA-256 of the default draw's split files (`livethink data generate`, seed 0) as they were before `holdout` was
# added: adding a split must not move a byte of the others
SPLIT_SHA256 = {"train": "e2a9c3b9485611597833f9281ddd15e96e2aa01f2682ec84b3cc208206d9fe23",
                "validation": "82075a5f941d529f79b8b3e55a8493b8f16d6ddf9471541f06c04910cef02847",
                "test": "eab47fc2dda8cd5ca13f2e79b44aaba3623a3f20db91836ea73b6933bd4cdf09"}


def test_the_default_splits_are_byte_identical_to_their_pinned_hashes(tmp_path):
    data = generate()
    for split, digest in SPLIT_SHA256.items():
        write_jsonl(data.tasks[split], tmp_path / f"{split}.jsonl")
        assert hashlib.sha256((tmp_path / f"{split}.jsonl").read_bytes()).hexdigest() == digest, split
    assert len(data.tasks["holdout"]) == N_HOLDOUT == 1000


def test_holdout_products_are_in_no_other_split(liveshop_small):
    assert SPLITS == ("train", "validation", "test", "holdout")
    held = liveshop_small.tasks["holdout"]
    assert len(held) == N_HOLDOUT and {t.split for t in held} == {"holdout"} and held[0].id == "holdout-000000"
    used = {s: {pid for t in liveshop_small.tasks[s] for pid in t.product_ids} for s in SPLITS}
    listed = {s: {p.id for p in liveshop_small.catalog[s]} for s in SPLITS}
    others = set().union(*(used[s] | listed[s] for s in SPLITS if s != "holdout"))
    assert used["holdout"] and used["holdout"] <= listed["holdout"]
    assert not (used["holdout"] | listed["holdout"]) & others
    docs = {d.text.split("] ", 1)[1] for s in SPLITS if s != "holdout" for t in liveshop_small.tasks[s]
            for d in t.product_docs}
    assert not {d.text.split("] ", 1)[1] for t in held for d in t.product_docs} & docs  # no product re-labelled either
    assert {t.kind for t in held} == set(QUESTION_KINDS)


def test_holdout_has_its_own_seed():
    """The holdout draw depends on ``holdout_seed`` alone: not on ``seed`` nor on the other splits' sizes."""
    small = generate(seed=0, n_train=30, n_validation=5, n_test=5, n_holdout=20)
    other = generate(seed=9, n_train=60, n_validation=9, n_test=3, n_holdout=20)
    assert small.tasks["holdout"] == other.tasks["holdout"]
    assert small.catalog["holdout"] == other.catalog["holdout"]
    moved = generate(seed=0, n_train=30, n_validation=5, n_test=5, n_holdout=20, holdout_seed=HOLDOUT_SEED + 1)
    assert [t.question for t in moved.tasks["holdout"]] != [t.question for t in small.tasks["holdout"]]
    assert moved.tasks["train"] == small.tasks["train"]  # the other splits do not see the holdout seed
    assert generate(seed=0, n_train=30, n_validation=5, n_test=5, n_holdout=0).tasks["holdout"] == []


def test_every_question_kind_appears(liveshop_small):
    kinds = {t.kind for t in liveshop_small.tasks["train"]}
    assert kinds == set(QUESTION_KINDS)


def test_dialogue_ref_has_history_and_answer_in_docs(liveshop_small):
    tasks = [t for t in liveshop_small.tasks["train"] if t.kind == "dialogue_ref"]
    assert tasks
    for t in tasks:
        assert t.history and t.history[-1].role == "host"
        assert t.reference.kind == "number"


def test_unanswerable_reference_is_not_stated(liveshop_small):
    for t in liveshop_small.tasks["train"]:
        assert (t.kind == "unanswerable") == (t.reference.kind == "not_stated")


def _product(**overrides) -> Product:
    base = dict(
        id="P1", brand="Aurora", style="Classic", category="jacket", price=100.0, discount_pct=20,
        coupon=Coupon(threshold=150.0, amount_off=15.0), bundle=Bundle(min_quantity=2, extra_pct=10),
        stock={("black", "M"): 3}, shipping_days=3, free_shipping_over=99.0, return_days=30,
        warranty_months=12, material="wool blend", care=None, origin=None,
    )
    base.update(overrides)
    return Product(**base)


def test_price_quote_hand_computed():
    p = _product()
    assert p.sale_price == 80.0
    assert price_quote(p, 1) == 80.0  # below coupon threshold, no bundle
    assert price_quote(p, 2) == 144.0  # 160 * 0.9 = 144 < 150: no coupon
    assert price_quote(p, 3) == 201.0  # 240 * 0.9 = 216 >= 150: 216 - 15
    assert price_quote(_product(bundle=None, coupon=None, discount_pct=0), 2) == 200.0


def test_reference_value_must_fit_kind():
    with pytest.raises(ValidationError, match="does not fit kind"):
        Reference(kind="number", value="twelve")
    with pytest.raises(ValidationError):
        Reference(kind="yes_no", value=None)
    with pytest.raises(ValidationError):
        Reference(kind="number", value=True)
    assert Reference(kind="not_stated").value is None


def test_jsonl_parquet_dataset_round_trip(tmp_path, liveshop_small):
    tasks = liveshop_small.tasks["test"][:20]
    write_jsonl(tasks, tmp_path / "t.jsonl")
    write_parquet(tasks, tmp_path / "t.parquet")
    to_dataset(tasks).save_to_disk(str(tmp_path / "ds"))
    for source in ("t.jsonl", "t.parquet", "ds"):
        assert read_tasks(tmp_path / source) == tasks, source


def test_loader_reports_invalid_rows_with_line_and_reason(tmp_path, liveshop_small):
    good = liveshop_small.tasks["train"][:3]
    bad_kind = good[0].model_dump(mode="json") | {"id": "x1", "kind": "weather"}
    missing_question = {k: v for k, v in good[1].model_dump(mode="json").items() if k != "question"} | {"id": "x2"}
    lines = [good[0].model_dump_json(), "{not json", json.dumps(bad_kind), good[1].model_dump_json(),
             json.dumps(missing_question), good[0].model_dump_json(), good[2].model_dump_json()]
    path = tmp_path / "user.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = load_tasks(path)
    assert [t.id for t in result.tasks] == [good[0].id, good[1].id, good[2].id]
    assert [e.location for e in result.errors] == ["line 2", "line 3", "line 5", "line 6"]
    assert "invalid JSON" in result.errors[0].reason
    assert "kind" in result.errors[1].reason
    assert "question" in result.errors[2].reason
    assert "duplicate task id" in result.errors[3].reason
    with pytest.raises(InvalidTaskError, match="line 2"):
        load_tasks(path, strict=True)


def test_loader_rejects_unknown_format(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match="unsupported data format"):
        load_tasks(tmp_path / "x.csv")
    with pytest.raises(FileNotFoundError):
        load_tasks(tmp_path / "missing.jsonl")


def test_prompt_messages_and_completion_layout(liveshop_small):
    task: Task = next(t for t in liveshop_small.tasks["train"] if t.history)
    messages = build_messages(task)
    assert messages[0]["role"] == "system" and task.product_docs[0].text in messages[0]["content"]
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "user"]
    assert messages[-1]["content"] == task.question
    assert format_completion(" a b ", " reply ") == "<think>\na b\n</think>\n\nreply"


def test_make_task_index_is_stable(liveshop_small):
    pool = liveshop_small.catalog["train"]
    assert make_task(1, "train", 5, pool) == make_task(1, "train", 5, pool)


def test_cli_generate_validate(tmp_path):
    out = tmp_path / "data"
    run = subprocess.run([sys.executable, "-m", "livethink.cli", "data", "generate", "--out", str(out), "--n-train", "200",
                          "--n-validation", "20", "--n-test", "40", "--n-holdout", "30"],
                         capture_output=True, text=True, check=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"] == {"train": 200, "validation": 20, "test": 40, "holdout": 30}
    assert manifest["products_shared_train_test"] == 0 == manifest["products_shared_holdout_other"]
    assert manifest["holdout_seed"] == HOLDOUT_SEED and (out / "holdout.jsonl").is_file()
    assert "generating train" in run.stderr  # progress bar
    (out / "broken.jsonl").write_text((out / "test.jsonl").read_text().splitlines()[0] + "\n{oops\n")
    check = subprocess.run([sys.executable, "-m", "livethink.cli", "data", "validate", str(out / "broken.jsonl")],
                           capture_output=True, text=True)
    assert check.returncode == 1 and "1 valid, 1 invalid" in check.stdout and "line 2" in check.stderr
    strict = subprocess.run([sys.executable, "-m", "livethink.cli", "data", "validate", "--strict",
                             str(out / "broken.jsonl")], capture_output=True, text=True)
    assert strict.returncode == 1 and "line 2" in strict.stderr


def test_prices_round_half_up_in_decimal():
    p = _product(price=186.90, discount_pct=0, coupon=None, bundle=None)
    assert _product(price=186.90, discount_pct=5, coupon=None, bundle=None).sale_price == 177.56  # 177.555
    assert price_quote(_product(price=186.90, discount_pct=5, coupon=None, bundle=None), 1) == 177.56
    assert price_quote(p, 3) == 560.70


def test_plural_titles():
    from livethink.data.liveshop.questions import plural

    assert plural("Aurora Classic Jacket") == "Aurora Classic Jackets"
    assert plural("Pebble Trail Sneakers") == "Pebble Trail Sneakers"
