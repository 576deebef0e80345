"""One request's walk, top to bottom, shared by every endpoint (``service.Service`` ties it together):

1. ``jobs``: a validated request becomes a ``Job`` (arm, model, deadline, prompt ids, sampling) or a 4xx;
2. ``quality`` + ``admission``: the job's token budget against its deadline, the queue and the model's thinking
   floor, or a refusal (429 + ``Retry-After``) at once;
3. ``running``: an engine slot, then the deadline-bounded generation (``generation``), split into thinking and
   reply (``reasoning``);
4. ``accounting``: what the finished request teaches the controller and records (metrics, A/B response).

May import: ``livethink.serve.budget``, ``.engines``, ``.telemetry``, ``.config``, ``.errors``; never ``.api``.
"""
