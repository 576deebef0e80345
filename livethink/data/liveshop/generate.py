"""Deterministic generation of LiveShop splits; validation, test and holdout use products never seen in train.

``train``, ``validation`` and ``test`` share one catalog draw (``seed``). ``holdout`` has its own generator seed
(``holdout_seed``, the same for every ``seed`` unless given): its products come from their own random stream, with
ids of their own (``H0000``...), so no other split's product appears in it, and its tasks depend neither on ``seed``
nor on the other splits' sizes. Adding it left the other three splits byte for byte as they were.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from livethink.data.liveshop.catalog import Product, make_product
from livethink.data.liveshop.questions import BUILDERS
from livethink.data.schema import Task

KIND_WEIGHTS = {"attribute": 1.0, "availability": 1.0, "price": 1.5, "comparison": 1.0, "dialogue_ref": 1.0, "unanswerable": 0.8}
SPLITS = ("train", "validation", "test", "holdout")
SHARED_CATALOG_SPLITS = ("train", "validation", "test")  # drawn from one catalog stream, in this order
HOLDOUT_SEED = 55  # the holdout split's own generator seed
N_HOLDOUT = 1000


@dataclass(frozen=True)
class GeneratedData:
    catalog: dict[str, list[Product]]  # split -> products
    tasks: dict[str, list[Task]]  # split -> tasks


PRODUCT_PREFIX = {"train": "P", "validation": "V", "test": "T", "holdout": "H"}


def make_catalog(seed: int, n_products: dict[str, int], holdout_seed: int = HOLDOUT_SEED) -> dict[str, list[Product]]:
    """Products per split, disjoint by construction (ids carry the split's prefix). ``train``, ``validation`` and
    ``test`` are drawn in that order from one stream (``seed``); ``holdout`` (when ``n_products`` has it) from a
    stream of its own (``holdout_seed``)."""
    rng = random.Random(f"liveshop-catalog:{seed}")
    catalog = {split: [make_product(rng, f"{PRODUCT_PREFIX[split]}{i:04d}") for i in range(n_products[split])]
               for split in SHARED_CATALOG_SPLITS}
    if "holdout" in n_products:
        held = random.Random(f"liveshop-holdout-catalog:{holdout_seed}")
        catalog["holdout"] = [make_product(held, f"{PRODUCT_PREFIX['holdout']}{i:04d}")
                              for i in range(n_products["holdout"])]
    return catalog


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
    n_holdout: int = N_HOLDOUT,
    holdout_seed: int = HOLDOUT_SEED,
) -> GeneratedData:
    """Generate a catalog and tasks for the four splits (``SPLITS``; ``holdout`` from its own seed
    ``holdout_seed``).

    ``progress(iterable, total, desc)`` may wrap the loops (e.g. ``tqdm``).
    """
    counts = {"train": n_train, "validation": n_validation, "test": n_test, "holdout": n_holdout}
    catalog = make_catalog(seed, {split: default_products(n) for split, n in counts.items()}, holdout_seed)
    tasks: dict[str, list[Task]] = {}
    for split in SPLITS:
        indices: Iterator[int] = iter(range(counts[split]))
        if progress is not None:
            indices = progress(indices, counts[split], split)
        split_seed = holdout_seed if split == "holdout" else seed
        tasks[split] = [make_task(split_seed, split, i, catalog[split]) for i in indices]
    return GeneratedData(catalog=catalog, tasks=tasks)
