"""Test support: helpers the test packages import as ``tests.support.<module>``.

- ``students``: tiny random students (built in seconds) and a rule judge; the session's shared serving student.
- ``serve``: serve configs, a uvicorn server in a thread, a CLI server in a subprocess, a fault-injection engine.
- ``teacher_fault_server``: an OpenAI-compatible HTTP server with injected faults.
- ``http_load_client`` and ``distributed_run``: scripts the tests run as their own processes (by path).

Expensive things are pytest fixtures in ``tests/conftest.py`` (session scope); the functions here build them.
"""
