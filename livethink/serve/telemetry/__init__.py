"""What the server counts and reports: Prometheus metrics (``metrics``), the recent refusal share (``refusals``)
and the A/B hooks that assign arms and record exposures, responses and outcomes (``ab_hooks``, an adapter over
``livethink.ab_test``).

May import: ``livethink.serve.errors``, ``livethink.ab_test``; never the request path, the engines or the HTTP
surface.
"""
