"""Nothing heavy on the event loop (issue #59, item 4) and the right field for a prompt that is too long (#60,
item 5), over real loopback HTTP with the fault-injection engine and the tiny student's real tokenizer: a body
over the limit is refused (413) and one whose characters alone cannot fit (400) without tokenising; a slow
tokenizer does not hold ``/health/live``; the 400 names the longest part with each part's token count."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from livethink.serve.api.app import create_app
from livethink.serve.request_path.prompt_length import (
    chars_per_token,
    fewest_tokens,
    longest,
    too_many_characters,
    with_template,
)
from tests.support.serve import (
    LIVE_BODY,
    ServerThread,
    SlowEngine,
    engine_set,
    load_tokenizer,
    make_config,
    tiny_student_dir,
)

pytestmark = [pytest.mark.timeout(120)]
HTTP = httpx.Client(timeout=30)
LIVE = "/v1/livestream/reply"
DOC = "Price: $39. Stock: S 2, M 3, L 0 left. Cotton fleece, machine wash cold. Ships in 2 days. "


class SpyTokenizer:
    """The tiny student's tokenizer, counting prompt renders and encodes and recording the thread that renders;
    ``sleep_s``: each render first sleeps that long (a slow tokenizer)."""

    def __init__(self, inner: Any, sleep_s: float = 0.0):
        self._inner, self.sleep_s = inner, sleep_s
        self.renders: list[threading.Thread] = []
        self.encodes = 0

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        self.renders.append(threading.current_thread())
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return self._inner.apply_chat_template(*args, **kwargs)

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        self.encodes += 1
        return self._inner.encode(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(tiny_student_dir())


@pytest.fixture(scope="module")
def served(tokenizer):
    spy = SpyTokenizer(tokenizer)
    config = make_config(tiny_student_dir(), **{"engine.probe_interval_s": None})
    server = ServerThread(create_app(config, engine_set(SlowEngine(spy, token_s=0.002), 4)))
    yield server, spy
    server.close()


def _big_body(doc_chars: int, docs: int) -> bytes:
    text = (DOC * (doc_chars // len(DOC) + 1))[:doc_chars]
    body = {**LIVE_BODY, "product_docs": [{"product_id": f"p{i}", "title": "T", "text": text} for i in range(docs)]}
    return json.dumps(body).encode()


def _post(url: str, body: bytes) -> httpx.Response:
    return HTTP.post(f"{url}{LIVE}", content=body, headers={"content-type": "application/json"})


# -- the cheap checks come first ------------------------------------------------------------------------------
def test_a_body_over_1_mib_is_refused_with_413_without_tokenising(served):
    server, spy = served
    body = _big_body(180_000, 6)
    assert len(body) > 1024 * 1024
    renders, encodes = len(spy.renders), spy.encodes
    r = _post(server.url, body)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large", r.text
    assert (len(spy.renders), spy.encodes) == (renders, encodes)


def test_a_prompt_whose_characters_cannot_fit_is_refused_without_tokenising(served):
    server, spy = served
    body = _big_body(170_000, 6)  # just under 1 MiB: read, parsed and validated, then counted
    assert 1_000_000 < len(body) <= 1024 * 1024
    renders, encodes = len(spy.renders), spy.encodes
    t0 = time.monotonic()
    r = _post(server.url, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and err["param"] == "product_docs"
    assert "product_docs: the prompt has at least " in err["message"]
    assert "characters: question 23, product_docs 1,020,000, history 0" in err["message"]
    assert (len(spy.renders), spy.encodes) == (renders, encodes)
    assert time.monotonic() - t0 < 5


@pytest.mark.timing
def test_a_slow_tokenizer_does_not_hold_the_event_loop(served):
    server, spy = served
    HTTP.get(f"{server.url}/health/live")
    spy.sleep_s = 0.2
    try:
        answer: dict[str, Any] = {}
        request = threading.Thread(target=lambda: answer.update(r=HTTP.post(f"{server.url}{LIVE}", json=LIVE_BODY)))
        renders = len(spy.renders)
        request.start()
        while len(spy.renders) == renders:  # the render (and its 200 ms sleep) has begun
            time.sleep(0.002)
        t0 = time.monotonic()
        assert HTTP.get(f"{server.url}/health/live").status_code == 200
        live_s = time.monotonic() - t0
        request.join(10)
    finally:
        spy.sleep_s = 0.0
    assert answer["r"].status_code == 200, answer["r"].text
    assert spy.renders[-1] is not server.thread  # rendered and tokenised in a worker thread
    assert live_s < 0.1, live_s  # on the loop, the render would have held /health/live ~200 ms


# -- the right field ------------------------------------------------------------------------------------------
def test_a_long_question_is_named_with_each_parts_token_count(served, tokenizer):
    server, _ = served
    question = ("Is the hoodie warm enough for a winter evening outside, and does it run small? " * 46)[:3600]
    r = HTTP.post(f"{server.url}{LIVE}", json={**LIVE_BODY, "question": question})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["param"], err["code"]) == ("question", "context_length_exceeded")
    counts = dict(item.rsplit(" ", 1) for item in err["message"].split("(tokens: ")[1].rstrip(")").split(", "))
    assert set(counts) == {"question", "product_docs", "history", "template"}
    n = {k: int(v.replace(",", "")) for k, v in counts.items()}
    assert n["question"] == len(tokenizer.encode(question, add_special_tokens=False))
    assert n["product_docs"] == len(tokenizer.encode(LIVE_BODY["product_docs"][0]["text"], add_special_tokens=False))
    assert n["history"] == 0 and 0 < n["template"] < 200
    total = int(err["message"].split("the prompt has ")[1].split(" tokens")[0].replace(",", ""))
    assert total > 768 and "question is the longest part" in err["message"]


def test_a_long_history_is_named(served):
    server, _ = served
    history = [{"role": "viewer", "content": DOC * 6}] * 8
    r = HTTP.post(f"{server.url}{LIVE}", json={**LIVE_BODY, "history": history})
    assert r.status_code == 400 and r.json()["error"]["param"] == "history", r.text


# -- the pure parts -------------------------------------------------------------------------------------------
def test_prompt_length_arithmetic_by_hand():
    assert fewest_tokens(10, 3) == 4 and fewest_tokens(9, 3) == 3
    assert longest({"question": 5, "product_docs": 9, "history": 9, "template": 50}) == "product_docs"
    assert longest({"template": 3}) == "template"
    assert with_template(100, {"question": 60, "product_docs": 30}) == {"question": 60, "product_docs": 30, "template": 10}
    assert with_template(80, {"question": 60, "product_docs": 30})["template"] == 0  # merges across a boundary
    chars = {"question": 100, "product_docs": 5000, "history": 0}
    assert too_many_characters(chars, limit=100, per_token=60, param=None) is None  # 5,100 / 60 -> 85 tokens
    err = too_many_characters(chars, limit=100, per_token=40, param=None)  # 5,100 / 40 -> at least 128
    assert (err.status, err.param, err.code) == (400, "product_docs", "context_length_exceeded")
    assert err.message.startswith("product_docs: the prompt has at least 128 tokens (5,100 characters, and no token")
    assert too_many_characters(chars, limit=100, per_token=40, param="messages").param == "messages"


def test_chars_per_token_bounds_only_tokenizers_that_keep_every_character(tokenizer):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    longest_entry = max(len(t) for t in tokenizer.get_vocab())
    assert chars_per_token(tokenizer) == 4 * longest_entry  # NFC: up to 4 code points compose into one
    vocab = {"[UNK]": 0, "a": 1, "abcdef": 2}

    def fast(normalizer: Any, pre: Any) -> Any:
        tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        if normalizer is not None:
            tok.normalizer = normalizer
        tok.pre_tokenizer = pre
        return PreTrainedTokenizerFast(tokenizer_object=tok)

    assert chars_per_token(fast(None, pre_tokenizers.ByteLevel())) == 6
    assert chars_per_token(fast(normalizers.NFKC(), pre_tokenizers.Metaspace())) == 24
    assert chars_per_token(fast(None, pre_tokenizers.Whitespace())) is None  # drops spaces
    assert chars_per_token(fast(normalizers.Strip(), pre_tokenizers.ByteLevel())) is None
    assert chars_per_token(object()) is None  # not a fast tokenizer
