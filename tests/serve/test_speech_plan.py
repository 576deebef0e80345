"""Speech pacing of streamed livestream replies, hand-computed: the avatar's speech clock and stalls, the paced
hard cut, the streamed plan (only the first sentence inside the deadline), what a sentence is (one rule for the
streamed sentences and the cut reply: nothing sent is ever retracted), and the first-sentence lengths learnt."""

from __future__ import annotations

import random

import pytest

from livethink.serve.budget.controller import BudgetController
from livethink.serve.budget.plan import BudgetPolicy, Estimates, Reject, TokenBudget, plan_budget
from livethink.serve.budget.speech import SpeechClock, paced_bound, speaking_s, word_count
from livethink.serve.request_path.reasoning import SentenceStream, sentence_ends, usable_reply

POLICY = BudgetPolicy(margin_s=0.05, reply_reserve=48, min_reply_tokens=8, max_thinking_tokens=256, max_tokens=512)
EST = Estimates(wait=0.0, ttft=0.1, tpot=0.01)


# -- speech -------------------------------------------------------------------------------------------------
def test_words_and_speaking_time():
    assert word_count(" The hoodie costs $39.50.") == 4
    assert word_count("") == 0
    assert speaking_s(5, 2.5) == 2.0
    with pytest.raises(ValueError, match="rate_wps"):
        speaking_s(5, 0)


def test_speech_clock_counts_a_stall_only_when_the_avatar_fell_silent():
    clock = SpeechClock(2.5)
    assert clock.add(0.5, 5) is False  # the first sentence never stalls; spoken 0.5 .. 2.5
    assert clock.end == pytest.approx(2.5)
    assert clock.add(1.0, 5) is False  # arrived while the first was spoken: starts at 2.5, ends 4.5
    assert clock.end == pytest.approx(4.5)
    assert clock.add(5.0, 2) is True  # 0.5 s of silence before it: a stall; 5.0 .. 5.8
    assert clock.end == pytest.approx(5.8)
    assert (clock.stalls, clock.sentences, clock.words) == (1, 3, 12)


def test_paced_bound():
    assert paced_bound(0.97, 0, 2.5, 30.0) == 0.97  # nothing sent: the first sentence's cut
    assert paced_bound(0.97, 5, 2.5, 30.0) == pytest.approx(2.97)  # + 5 words / 2.5 wps
    assert paced_bound(0.97, 100, 2.5, 30.0) == 30.0  # capped
    assert paced_bound(0.97, 5, 2.5, 0.5) == 0.97  # never before the first cut


def test_a_paced_reply_ends_its_speech_by_the_cut_plus_its_speaking_time():
    """Sentences sent at the latest the bound allows keep the avatar speaking until exactly first_cut + W/rate."""
    clock, first_cut, rate = SpeechClock(2.0), 1.0, 2.0
    for words in (4, 6, 2):
        t = paced_bound(first_cut, clock.words, rate, 60.0)  # the latest the next sentence may come
        clock.add(t, words)
        assert clock.end <= first_cut + clock.words / rate + 1e-9
    assert clock.end == pytest.approx(1.0 + 12 / 2.0)


# -- the streamed plan -------------------------------------------------------------------------------------
def test_a_streamed_plan_keeps_only_the_first_sentence_inside_the_deadline():
    # N_total = floor((1.0 - 0 - 0.1 - 0.05) / 0.01) = 85
    plain = plan_budget(1.0, EST, POLICY, now=0.0)
    assert (plain.thinking_cap, plain.reply_reserve) == (37, 48)  # 85 - 48
    assert plain.thinking_deadline == pytest.approx(0.47)  # 1.0 - 0.05 - 48 * 0.01
    streamed = plan_budget(1.0, EST, POLICY, now=0.0, first_sentence=10)
    assert (streamed.thinking_cap, streamed.reply_reserve) == (75, 48)  # 85 - 10: 38 tokens given back
    assert streamed.thinking_deadline == pytest.approx(0.85)  # 1.0 - 0.05 - 10 * 0.01
    # the planned first sentence: 0.1 + 75 * 0.01 of thinking, then 10 tokens
    assert streamed.expected_end == pytest.approx(0.95)


def test_a_streamed_plan_thinks_where_a_whole_reply_would_not():
    # N_total = floor((0.3 - 0.15) / 0.01) = 15: the whole reserve leaves no thinking
    assert plan_budget(0.3, EST, POLICY).thinking_cap == 0
    streamed = plan_budget(0.3, EST, POLICY, first_sentence=10)
    assert (streamed.thinking_cap, streamed.reply_reserve) == (5, 48)  # 15 - 10, the reserve after the deadline
    # N_total = 5: fewer than min_reply_tokens (8) is a refusal, but a 4-token first sentence fits
    assert isinstance(plan_budget(0.2, EST, POLICY), Reject)
    assert plan_budget(0.2, EST, POLICY, first_sentence=4) == TokenBudget(1, 48)


def test_a_streamed_plan_sizes_thinking_on_the_measured_first_sentences():
    est = Estimates(wait=0.0, ttft=0.1, tpot=0.01, tpot_mean=0.01, tpot_hi=0.02)
    p = plan_budget(1.0, est, POLICY, now=0.0, first_sentence=12, reply_expected=9, reply_tail=12)
    assert p.thinking_cap == 85 - 9  # N_expected (85) less the typical first sentence (9 tokens)
    assert p.thinking_deadline == pytest.approx(1.0 - 0.05 - 12 * 0.02)  # in time for the tail at tpot_hi


def test_the_controller_learns_first_sentences_per_model():
    c = BudgetController(POLICY, {"e": 4})
    assert c.first_sentence_lengths("livestream:rft", 16) == (16, 16)  # the config default before any
    for n in (6, 8, 10, 12, 30):
        c.observe_first_sentence("livestream:rft", n)
    assert c.first_sentence_lengths("livestream:rft", 16) == (10, 30)  # median, 0.9 quantile (nearest rank)
    assert c.first_sentence_lengths("livestream:drpo", 16) == (16, 16)


# -- what a sentence is --------------------------------------------------------------------------------------
def test_sentence_ends_growing_and_final():
    assert sentence_ends("It is $39. Yes", final=False) == [10]
    assert sentence_ends("It costs $39.", final=False) == []  # "$39." may become "$39.50"
    assert sentence_ends("It costs $39.", final=True) == [13]


def test_sentences_stream_as_soon_as_complete():
    s = SentenceStream()
    assert s.feed("The hoodie") == []
    assert s.feed(" costs $39.") == []
    assert s.feed("50 now.") == []  # "$39." was not a sentence end
    assert s.feed(" It") == ["The hoodie costs $39.50 now."]
    assert s.feed(" ships in 2 days") == []
    assert s.finish(complete=True) == [" It ships in 2 days"]  # a finished reply's last words are spoken too
    assert s.spoken == "The hoodie costs $39.50 now. It ships in 2 days"


def test_at_a_cut_the_reply_is_exactly_the_sentences_sent():
    s = SentenceStream()
    assert s.feed("Yes. Two.") == ["Yes."]
    assert s.finish(complete=False) == [" Two."]  # final now: the end of the text ends a sentence
    assert s.spoken == usable_reply("Yes. Two.", complete=False) == "Yes. Two."
    s = SentenceStream()
    assert s.feed("Yes. It is in st") == ["Yes."]
    assert s.finish(complete=False) == []
    assert s.spoken == usable_reply("Yes. It is in st", complete=False) == "Yes."


def test_a_second_think_block_ends_the_reply():
    s = SentenceStream(stop="<think>")
    assert s.feed("Yes. <thi") == ["Yes."]
    assert s.feed("nk> hmm. more. ") == []
    assert s.finish(complete=True) == []
    assert s.spoken == "Yes."


@pytest.mark.parametrize("seed", range(3))
def test_streamed_sentences_are_never_retracted(seed):
    """Random replies in random pieces: every sentence streamed stays, and the sentences joined are the reply
    the non-streamed rule keeps (``usable_reply``), at a cut and at the end."""
    rng = random.Random(seed)
    words = ["$39.", "50", "Yes.", "it", "ships!", "in", "2", "days?", "M", "3.5", "left.", "ok", "\n"]
    for _ in range(300):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 14)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(1, 6))))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        for complete in (True, False):
            s, sent = SentenceStream(), []
            for piece in pieces:
                sent += s.feed(piece)
                assert "".join(sent) == s.spoken and usable_reply(text, False).startswith(s.spoken.strip())
            sent += s.finish(complete)
            assert "".join(sent) == s.spoken == usable_reply(text.lstrip(), complete)
            assert all(x.strip() for x in sent)
