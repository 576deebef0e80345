"""Open-loop HTTP load client for the serve tests, run as its own process (its clock is not the server's):

    python tests/support/http_load_client.py URL --rate 20 --count 60 --deadline-ms 1000 [--seed 0]

Poisson arrivals of ``POST /v1/livestream/reply``; prints one JSON object: per request the status, the
client's wall time from just before the request is written to the last byte read, and the server's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

import httpx

BODY = {
    "question": "How much is the hoodie?",
    "product_docs": [{"product_id": "p1", "title": "Hoodie", "text": "Price: $39. Ships in 2 days."}],
}


async def one(client: httpx.AsyncClient, url: str, i: int, deadline_ms: int) -> dict:
    body = {**BODY, "viewer_id": f"viewer-{i}", "deadline_ms": deadline_ms}
    t0 = time.monotonic()
    try:
        r = await client.post(f"{url}/v1/livestream/reply", json=body)
        content = r.content  # the last byte
        client_ms = (time.monotonic() - t0) * 1000
    except httpx.HTTPError as exc:
        return {"i": i, "status": None, "error": type(exc).__name__, "client_ms": (time.monotonic() - t0) * 1000}
    out = {"i": i, "status": r.status_code, "client_ms": client_ms}
    if r.status_code == 429:
        out["retry_after"] = r.headers.get("retry-after")
    if r.status_code == 200:
        data = json.loads(content)
        out.update(server_ms=data["timings"]["e2e_ms"], deadline_met=data["deadline_met"])
    return out


async def main(url: str, rate: float, count: int, deadline_ms: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(timeout=deadline_ms / 1000 + 10, limits=limits) as client:
        await client.get(f"{url}/health")  # the client's own first-use costs are not the server's
        tasks = []
        for i in range(count):
            tasks.append(asyncio.create_task(one(client, url, i, deadline_ms)))
            await asyncio.sleep(rng.expovariate(rate))
        return list(await asyncio.gather(*tasks))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--rate", type=float, default=20)
    p.add_argument("--count", type=int, default=60)
    p.add_argument("--deadline-ms", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    print(json.dumps(asyncio.run(main(a.url, a.rate, a.count, a.deadline_ms, a.seed))))
