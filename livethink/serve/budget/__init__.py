"""The latency-budget controller: from a deadline and live estimates to a token budget (or a refusal).

Owns the pure budget math (``plan``), the time-decayed latency estimates (``estimates``), the engine slots and
their queue (``slots``), the speech pacing of a streamed reply (``speech``) and the controller that holds them
per engine (``controller``), and the token buckets of the rate limits (``token_bucket``).

May import: nothing else of ``livethink.serve`` (it is the bottom layer); ``livethink.data`` for the reasoning
format's constants.
"""
