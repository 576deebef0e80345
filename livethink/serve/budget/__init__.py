"""The latency-budget controller: from a deadline and live estimates to a token budget (or a refusal).

Owns the pure budget math (``plan``), the time-decayed latency estimates (``estimates``), the engine slots and
their queue (``slots``) and the controller that holds them per engine (``controller``).

May import: nothing else of ``livethink.serve`` (it is the bottom layer); ``livethink.data`` for the reasoning
format's constants.
"""
