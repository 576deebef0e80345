"""The HTTP surface: the FastAPI app and its routes (``app``), its start and stop (``lifespan``), the responses built
from ``livethink.serve.protocol``'s models (``responses``), the edge (``routing``: auth, body limit, one error
shape), the rate limits and A/B scope (``limits``), the drain on SIGTERM (``drain``), the client's clock
(``clock``) and the OpenAPI document (``api_docs``, ``openapi``).

May import: every other part of ``livethink.serve``; nothing below imports it.
"""
