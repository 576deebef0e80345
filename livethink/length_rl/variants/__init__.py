"""The registered stage-2 variants: every module of this package is imported, and registers itself.

``get_variant(name, cfg)`` builds the variant (``registry.Variant``) for a config; ``VARIANTS`` maps each name to its
class; ``option_classes()`` are the variants' option dataclasses that ``GRPOVariantConfig`` inherits.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from livethink.length_rl.registry import ALIASES, REGISTRY, Variant, canonical_name, lookup

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")

VARIANTS: dict[str, type[Variant]] = REGISTRY


def get_variant(name: str, cfg: Any = None) -> Variant:
    """The variant registered as ``name`` (or an alias such as ``baseline``), bound to ``cfg``."""
    return lookup(name)(cfg)


def variant_names() -> list[str]:
    """Registered names, then aliases."""
    return sorted(REGISTRY) + sorted(ALIASES)


def option_classes() -> tuple[type, ...]:
    """Each variant's option dataclass once, most recently registered first (the order of a class's bases)."""
    seen: list[type] = []
    for cls in REGISTRY.values():
        if cls.options is not None and cls.options not in seen:
            seen.append(cls.options)
    return tuple(reversed(seen))


__all__ = ["VARIANTS", "canonical_name", "get_variant", "option_classes", "variant_names"]
