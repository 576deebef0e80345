"""One access line per request, written once its outcome is known (the last byte sent, or the refusal): request
id, endpoint, arm, model, status, labels (forced end of thinking, cut, fallback), deadline, timings and tokens.

The line goes to the ``livethink.access`` logger as a dict (``record.access``); with ``--log-format json`` every
log record, this one included, is one JSON object per line (``JsonFormatter``), else the text formatter prints
``access {...}``.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

ACCESS = logging.getLogger("livethink.access")


def log_access(fields: dict[str, Any]) -> None:
    """Write ``fields`` as the access line of one request."""
    if ACCESS.isEnabledFor(logging.INFO):  # on every request's path: no serialising for a filtered line
        ACCESS.info("access %s", json.dumps(fields, separators=(",", ":")), extra={"access": fields})


class JsonFormatter(logging.Formatter):
    """A log record as one JSON object: time, level, logger, message, the access fields when present, and the
    exception's type and message (not its traceback lines, which stay one field)."""

    converter = time.gmtime

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
        }
        access = getattr(record, "access", None)
        if access is not None:
            out.update(access)
        else:
            out["message"] = record.getMessage()
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str, log_format: str) -> None:
    """Root logging for ``livethink serve``: ``text`` (a line per record) or ``json`` (an object per line)."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
