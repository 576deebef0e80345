"""Deterministic generation of LiveShop splits; the test split uses products never seen in train."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from livethink.data.liveshop.catalog import Product, make_product
from livethink.data.liveshop.questions import BUILDERS
from livethink.data.schema import Task

KIND_WEIGHTS = {"attribute": 1.0, "availability": 1.0, "price": 1.5, "comparison": 1.0, "dialogue_ref": 1.0, "unanswerable": 0.8}
SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class GeneratedData:
    catalog: dict[str, list[Product]]  # split -> products
    tasks: dict[str, list[Task]]  # split -> tasks


def make_catalog(seed: int, n_products: dict[str, int]) -> dict[str, list[Product]]:
    """Products per split, disjoint by construction (ids carry the split's prefix)."""
    rng = random.Random(f"liveshop-catalog:{seed}")
    prefix = {"train": "P", "validation": "V", "test": "T"}
    return {
        split: [make_product(rng, f"{prefix[split]}{i:04d}") for i in range(n_products[split])] for split in SPLITS
    }


def _pick_products(rng: random.Random, pool: list[Product], n: int) -> list[Product]:
    """n products whose short names (brand + style) differ, so a reply naming one is unambiguous."""
    chosen: list[Product] = []
    while len(chosen) < n:
        p = rng.choice(pool)
        if all((p.brand, p.style) != (c.brand, c.style) for c in chosen):
            chosen.append(p)
    return chosen


def make_task(seed: int, split: str, index: int, pool: list[Product]) -> Task:
    """Task ``index`` of a split: the same (seed, split, index) always gives the same task."""
    rng = random.Random(f"liveshop-task:{seed}:{split}:{index}")
    kinds, weights = zip(*KIND_WEIGHTS.items(), strict=True)
    while True:
        kind = rng.choices(kinds, weights=weights)[0]
        builder, needed = BUILDERS[kind]
        on_screen = max(needed, rng.choice((1, 1, 2)))
        products = _pick_products(rng, pool, on_screen)
        draft = builder(rng, products)
        if draft is not None:
            break
    docs = [p.doc() for p in products]
    rng.shuffle(docs)
    return Task(
        id=f"{split}-{index:06d}",
        split=split,
        product_docs=tuple(docs),
        question=draft.question,
        history=draft.history,
        reference=draft.reference,
        helpful_facts=draft.helpful_facts,
        kind=kind,
        difficulty=draft.difficulty,
    )


def default_products(n_tasks: int) -> int:
    """Enough products that questions repeat a product only a handful of times."""
    return max(20, min(2000, n_tasks // 8))


def generate(
    seed: int = 0,
    n_train: int = 5000,
    n_validation: int = 500,
    n_test: int = 500,
    progress: Callable[[Iterator[int], int, str], Iterator[int]] | None = None,
) -> GeneratedData:
    """Generate a catalog and tasks for the three splits.

    ``progress(iterable, total, desc)`` may wrap the loops (e.g. ``tqdm``).
    """
    counts = {"train": n_train, "validation": n_validation, "test": n_test}
    catalog = make_catalog(seed, {split: default_products(n) for split, n in counts.items()})
    tasks: dict[str, list[Task]] = {}
    for split in SPLITS:
        indices: Iterator[int] = iter(range(counts[split]))
        if progress is not None:
            indices = progress(indices, counts[split], split)
        tasks[split] = [make_task(seed, split, i, catalog[split]) for i in indices]
    return GeneratedData(catalog=catalog, tasks=tasks)
