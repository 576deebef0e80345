"""LiveShop: a synthetic livestream shop and viewer questions with machine-checkable answers."""

from livethink.data.liveshop.catalog import Product, make_product, money, price_quote, render_doc
from livethink.data.liveshop.generate import GeneratedData, generate

__all__ = ["GeneratedData", "Product", "generate", "make_product", "money", "price_quote", "render_doc"]
