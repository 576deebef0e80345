"""Rewards and judges: parse a completion, correctness C (with the claim checker), helpfulness H, the LiveThinking
length band, the composite reward, the rubric and LLM judges, and TRL-signature adapters. See ``docs/rewards.md``."""

from livethink.rewards.adapters import (
    brevity_reward,
    composite_reward,
    correctness_reward,
    helpfulness_reward,
)
from livethink.rewards.brevity import band_reward, completion_length, count_tokens
from livethink.rewards.claim_check import ClaimIssue, ClaimReport, check_claims
from livethink.rewards.composite import CompositeWeights, composite
from livethink.rewards.correctness import CorrectnessResult, check_correctness, check_reply, correctness
from livethink.rewards.helpfulness import HelpfulnessResult, check_helpfulness, helpfulness
from livethink.rewards.judge import Judge, RubricJudge, Verdict, make_judge
from livethink.rewards.parse import Parsed, parse_completion, split_completion

__all__ = [
    "ClaimIssue",
    "ClaimReport",
    "CompositeWeights",
    "CorrectnessResult",
    "HelpfulnessResult",
    "Judge",
    "Parsed",
    "RubricJudge",
    "Verdict",
    "band_reward",
    "brevity_reward",
    "check_claims",
    "check_correctness",
    "check_helpfulness",
    "check_reply",
    "completion_length",
    "composite",
    "composite_reward",
    "correctness",
    "correctness_reward",
    "count_tokens",
    "helpfulness",
    "helpfulness_reward",
    "make_judge",
    "parse_completion",
    "split_completion",
]
