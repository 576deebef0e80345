"""Server config: YAML → validated ``ServeConfig`` (every error names its field); ``--set`` overrides.

See ``configs/tiny/serve.yaml`` (embedded default) and ``configs/prod/serve.yaml`` (Qwen3-30B-A3B) for the
fields. Relative paths are relative to the working directory (the repository root), like the other configs.
``livethink.serve.dry_run`` checks a loaded config against this machine.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from livethink.data.budget_forcing import REPLY_RESERVE
from livethink.data.reasoning_format import parse_setting
from livethink.serve.budget.controller import EstimatorSettings
from livethink.serve.budget.plan import BudgetPolicy
from livethink.yaml_files import yaml_error_line


class ConfigError(ValueError):
    """The serve config is invalid (the message names the field)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Strict):
    """A model variant: a checkpoint (``path``), optionally with a LoRA adapter (``lora``), or a LoRA adapter
    over another variant's checkpoint (``base`` + ``lora``: one vLLM engine serves both)."""

    path: str | None = None
    base: str | None = None
    lora: str | None = None
    max_concurrency: int | None = Field(default=None, ge=1)
    # reasoning delimiters: auto (checkpoint's reasoning_format.json, else the tokenizer), think, none, or
    # {start, end} (strings of any token length); see livethink.data.reasoning_format
    reasoning: str | dict[str, str] = "auto"
    min_thinking_tokens: int | None = Field(default=None, ge=0)  # None: thinking_calibration.json, else 0

    @field_validator("reasoning")
    @classmethod
    def _reasoning(cls, value: Any) -> Any:
        parse_setting(value, field="reasoning")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        if (self.path is None) == (self.base is None):
            raise ValueError(
                "set exactly one of path (a checkpoint) or base (another model's name, with lora)"
            )
        if self.base is not None and self.lora is None:
            raise ValueError("base needs lora (the adapter to put on it)")
        return self


class EngineConfig(_Strict):
    kind: Literal["auto", "vllm", "transformers"] = "auto"
    dtype: str = "bfloat16"  # vLLM
    transformers_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    transformers_device: str = "auto"  # the accelerator if torch sees one, else cpu; or e.g. "cpu", "cuda:1"
    max_model_len: int = Field(default=1024, ge=64)
    enforce_eager: bool = True  # no CUDA graphs (vLLM's, and the transformers engine's captured decode step)
    kv_cache_gib: int | None = Field(default=1, gt=0)  # VLLM_CPU_KVCACHE_SPACE (whole GiB, as vLLM reads it)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    tensor_parallel_size: int = Field(default=1, ge=1)
    max_num_seqs: int | None = Field(default=None, ge=1)
    enable_prefix_caching: bool | None = None
    budget_forcing: Literal["auto", "native", "two_phase"] = "auto"
    max_lora_rank: int = Field(default=16, ge=1)
    max_concurrency: int = Field(
        default=24, ge=1
    )  # requests running at once per vLLM engine (the rest queue)
    transformers_threads: int | None = Field(default=None, ge=1)
    warmup: bool = True  # a few short generations at start seed the latency estimates
    nice: int = Field(default=10, ge=0, le=39)  # engine processes run this much nicer than the front end
    calculator: bool = False  # digits after a written-out sum's "=" come from a calculator (livethink.calculator)
    # vLLM's own statistics (KV cache, running / waiting, preemptions, tokens) on /metrics as livethink_vllm_*
    export_engine_stats: bool = True
    # supervision (livethink.serve.engines.supervisor): a dead or wedged engine is restarted, its requests get 503
    supervise: bool = True
    health_poll_s: float = Field(default=0.5, gt=0, le=10)  # liveness poll of each engine
    restart_max: int = Field(default=3, ge=0)  # restarts within restart_window_s; one more: the process exits 4
    restart_window_s: float = Field(default=600.0, gt=0)
    restart_backoff_s: float = Field(default=1.0, ge=0)  # wait before restart n of the window: backoff * 2**(n-1)
    restart_backoff_max_s: float = Field(default=30.0, ge=0)
    restart_timeout_s: float = Field(default=300.0, gt=0)  # a restart that takes longer failed
    stall_s: float = Field(default=5.0, gt=0)  # a request waited this long for any output: stalled (health 503)
    stall_kill_s: float = Field(default=30.0, gt=0)  # stalled this long: killed and restarted as dead
    probe_interval_s: float | None = Field(default=10.0, gt=0)  # an idle engine is probed this often (64 tokens:
    # its decode time for the budget controller, and its liveness); None: never

    @model_validator(mode="after")
    def _stall_order(self) -> EngineConfig:
        if self.stall_kill_s <= self.stall_s:
            raise ValueError(f"stall_kill_s ({self.stall_kill_s}) must be larger than stall_s ({self.stall_s})")
        return self

    def supervision(self) -> Any:
        """The supervisor's policy (``livethink.serve.engines.supervisor.Policy``)."""
        from livethink.serve.engines.supervisor import Policy

        return Policy(
            poll_s=self.health_poll_s,
            restart_max=self.restart_max,
            restart_window_s=self.restart_window_s,
            backoff_s=self.restart_backoff_s,
            backoff_max_s=self.restart_backoff_max_s,
            stall_s=self.stall_s,
            stall_kill_s=self.stall_kill_s,
            start_timeout_s=self.restart_timeout_s,
        )


class BudgetConfig(_Strict):
    deadline_ms: int = Field(default=1000, gt=0)  # endpoints without their own deadline_ms use it; arms may override
    max_deadline_ms: int = Field(default=120_000, gt=0)
    margin_ms: float = Field(default=50.0, ge=0)
    finalize_ms: float = Field(default=50.0, ge=0)  # the hard cut comes this long before the deadline
    reply_reserve: int = Field(default=REPLY_RESERVE, ge=1)
    min_reply_tokens: int = Field(default=24, ge=1)
    max_thinking_tokens: int = Field(default=256, ge=0)
    max_tokens: int = Field(default=512, ge=1)
    fallback_reply: str = Field(
        default="Good question! Let me check that and get right back to you.", min_length=1
    )
    prior_ttft_ms: float = Field(default=50.0, gt=0)
    prior_tpot_ms: float = Field(default=10.0, gt=0)
    safety: float = Field(default=1.15, ge=1.0)
    cold_factor: float = Field(default=2.0, ge=1.0)  # priors count this much more until measured (fades)
    ramp_start: int | None = Field(default=4, ge=1)  # a cold engine opens this many slots, +1 per reply
    max_loop_lag_ms: float = Field(
        default=100.0, gt=0
    )  # event-loop lag above this: the front end is saturated, 429
    estimate_half_life_s: float = Field(default=30.0, gt=0)  # a latency measurement counts half after this long
    trickle_s: float = Field(default=2.0, ge=0)  # stale estimates: one probe request per engine this often
    reply_quantile: float = Field(default=0.9, gt=0, le=1)  # the reply-length tail that times the end of thinking
    refusal_window_s: float = Field(default=60.0, gt=0)  # /health: refusals counted over this window ...
    degraded_refusal_share: float = Field(default=0.5, gt=0, le=1)  # ... degraded at this share, engines idle
    degraded_min_requests: int = Field(default=5, ge=1)  # ... with at least this many requests in the window
    # the engines share one device (a CPU host: a request's decode speed depends on what runs on every engine);
    # None: when no GPU is visible
    shared_compute: bool | None = None

    def resolved_shared_compute(self) -> bool:
        """``shared_compute``, or whether the engines run on the host's CPU (no CUDA device visible)."""
        if self.shared_compute is not None:
            return self.shared_compute
        import torch

        return not torch.cuda.is_available()

    def policy(self) -> BudgetPolicy:
        return BudgetPolicy(
            margin_s=self.margin_ms / 1000,
            reply_reserve=self.reply_reserve,
            min_reply_tokens=self.min_reply_tokens,
            max_thinking_tokens=self.max_thinking_tokens,
            max_tokens=self.max_tokens,
        )

    def estimator(self) -> EstimatorSettings:
        return EstimatorSettings(
            prior_ttft_s=self.prior_ttft_ms / 1000,
            prior_tpot_s=self.prior_tpot_ms / 1000,
            safety=self.safety,
            cold_factor=self.cold_factor,
            half_life_s=self.estimate_half_life_s,
        )


class EndpointConfig(_Strict):
    deadline_ms: int | None = Field(default=None, gt=0)  # None = budget.deadline_ms
    stream_interval: int = Field(
        default=1, ge=1
    )  # engine deltas every n tokens (non-streamed replies: larger)
    # the model's thinking floor unmet: auto (per model and request from its calibration curve: answer while
    # a forced reply can be right, else the fallback reply; livethink.serve.request_path.quality.below_floor_action),
    # shed (429), fallback (the fallback reply) or answer (a forced reply)
    below_min_thinking: Literal["auto", "shed", "fallback", "answer"] = "auto"


class LivestreamConfig(EndpointConfig):
    """The livestream endpoint: a streamed reply paced to speech (``stream: true``), and what a refusal gets."""

    speech_rate_wps: float = Field(default=2.5, gt=0, le=20)  # the avatar's speech (a request may set its own)
    # planning a streamed reply: its first sentence's tokens, until the model's first sentences are measured
    first_sentence_tokens: int = Field(default=16, ge=1)
    streamed_interval: int = Field(default=1, ge=1)  # engine deltas every n tokens for a streamed reply
    # the latest a streamed reply's later sentences may come (ms from arrival); None: the chat endpoint's deadline
    max_stream_ms: int | None = Field(default=None, gt=0)
    # a request admission refuses: error (429 + Retry-After) or filler (HTTP 200 with a filler line, marked
    # fallback and refused); a request may set its own
    on_refusal: Literal["error", "filler"] = "error"
    filler_reply: str | None = Field(default=None, min_length=1)  # None: budget.fallback_reply


class EndpointsConfig(_Strict):
    livestream: LivestreamConfig = LivestreamConfig(stream_interval=8)
    chat: EndpointConfig = EndpointConfig(deadline_ms=30_000)


class SamplingConfig(_Strict):
    temperature: float = Field(default=0.7, ge=0, le=2)
    top_p: float = Field(default=0.95, gt=0, le=1)


class ExperimentConfig(_Strict):
    """A/B experiments (``livethink.ab_test`` YAML, one or several) and the event store they log to."""

    file: str
    store: str = "sqlite:///runs/serve/ab.db"  # or postgresql+psycopg://user@host/db
    # Write-ahead spool on local disk (one sub-directory per process; a restarted process replays a dead one's):
    # events survive a kill -9 and a store outage. None turns it off (events then wait for the store).
    spool_dir: str | None = "runs/serve/ab-spool"
    spool_max_mb: float = Field(default=256.0, gt=0)


class AuthConfig(_Strict):
    """Bearer tokens. With none set, auth is off. ``admin`` endpoints need an admin token when one is set."""

    api_keys: tuple[str, ...] = ()
    api_key_env: str | None = "LIVETHINK_API_KEY"  # comma-separated tokens in this variable
    admin_keys: tuple[str, ...] = ()
    admin_key_env: str | None = "LIVETHINK_ADMIN_KEY"
    public_paths: tuple[str, ...] = ("/health", "/health/live")
    # A/B-scoped tokens: with any key configured, forcing an arm (a request's ``arm``) and posting outcomes need
    # one of these or an admin token (``livethink.serve.api.limits``)
    ab_keys: tuple[str, ...] = ()
    ab_key_env: str | None = "LIVETHINK_AB_KEY"

    def ab_scoped(self) -> frozenset[str]:
        """The A/B-scoped tokens (``ab_keys`` and ``ab_key_env``'s)."""
        from_env = os.environ.get(self.ab_key_env, "") if self.ab_key_env else ""
        return frozenset([k for k in self.ab_keys if k] + [k.strip() for k in from_env.split(",") if k.strip()])

    def keys(self) -> tuple[frozenset[str], frozenset[str]]:
        def collect(keys: tuple[str, ...], env: str | None) -> frozenset[str]:
            from_env = os.environ.get(env, "") if env else ""
            return frozenset([k for k in keys if k] + [k.strip() for k in from_env.split(",") if k.strip()])

        return collect(self.api_keys, self.api_key_env), collect(self.admin_keys, self.admin_key_env)


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    max_body_kb: int = Field(default=1024, ge=1)  # larger POST bodies get a 413
    # SIGTERM: /health turns 503 (draining), new requests get 503, the process exits 0 once the requests in flight
    # have finished, or after this many seconds at most (keep it above the longest endpoint deadline)
    drain_s: float = Field(default=30.0, ge=0)


class LimitsConfig(_Strict):
    """Token-bucket rate limits (``livethink.serve.api.limits``): a request over one gets 429 + ``Retry-After``
    naming it. ``None`` rates turn a limit off (the default). A burst defaults to max(1, rate)."""

    per_viewer_rps: float | None = Field(default=None, gt=0)  # per viewer_id (chat: viewer_id, else user)
    per_viewer_burst: float | None = Field(default=None, ge=1)
    per_key_rps: float | None = Field(default=None, gt=0)  # per bearer token
    per_key_burst: float | None = Field(default=None, ge=1)
    max_tracked: int = Field(default=100_000, ge=1)  # buckets kept per limit (the least recently used go first)


class ServeConfig(_Strict):
    models: dict[str, ModelSpec] = Field(min_length=1)
    default_model: str
    engine: EngineConfig = EngineConfig()
    budget: BudgetConfig = BudgetConfig()
    endpoints: EndpointsConfig = EndpointsConfig()
    sampling: SamplingConfig = SamplingConfig()
    max_prompt_tokens: int = Field(default=768, ge=1)
    experiment: ExperimentConfig | None = None
    auth: AuthConfig = AuthConfig()
    server: ServerConfig = ServerConfig()
    limits: LimitsConfig = LimitsConfig()

    @model_validator(mode="after")
    def _consistent(self) -> ServeConfig:
        if self.default_model not in self.models:
            raise ValueError(
                f"default_model: {self.default_model!r} is not in models ({sorted(self.models)})"
            )
        for name, spec in self.models.items():
            if spec.base is not None:
                base = self.models.get(spec.base)
                if base is None:
                    raise ValueError(f"models.{name}.base: unknown model {spec.base!r}")
                if base.base is not None:
                    raise ValueError(f"models.{name}.base: {spec.base!r} is itself a LoRA variant")
        if self.max_prompt_tokens >= self.engine.max_model_len:
            raise ValueError(
                f"max_prompt_tokens ({self.max_prompt_tokens}) must be < engine.max_model_len "
                f"({self.engine.max_model_len})"
            )
        if self.budget.min_reply_tokens > self.budget.max_tokens:
            raise ValueError("budget.min_reply_tokens exceeds budget.max_tokens")
        return self

    def deadline_ms(self, endpoint: str) -> int:
        ep = getattr(self.endpoints, endpoint)
        return ep.deadline_ms or self.budget.deadline_ms

    def engine_groups(self) -> dict[str, dict[str, str | None]]:
        """Checkpoint engines: base model name -> {variant: LoRA dir or None}."""
        groups: dict[str, dict[str, str | None]] = {}
        for name, spec in self.models.items():
            if spec.path is not None:
                groups.setdefault(name, {})[name] = spec.lora
        for name, spec in self.models.items():
            if spec.base is not None:
                groups[spec.base][name] = spec.lora
        return groups


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def parse_config(data: Any, where: str = "serve config") -> ServeConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    try:
        return ServeConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_describe(exc)}") from None


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> ServeConfig:
    """Read a serve YAML; ``overrides`` are dotted keys (``engine.kind``, ``server.port``) → values (``--set``).

    ``budget.deadline_ms`` is the deadline of each endpoint without its own ``endpoints.*.deadline_ms``; an
    override of it that no endpoint would use is refused, naming the endpoint fields that govern."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:  # one line: file:line:column and the parser's reason
        raise ConfigError(yaml_error_line(path, exc)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping, got {type(data).__name__}")
    overrides = overrides or {}
    for key, value in overrides.items():
        node = data
        *parents, leaf = key.split(".")
        for p in parents:
            if node.get(p) is None:
                node[p] = {}
            node = node[p]
            if not isinstance(node, dict):
                raise ConfigError(f"{path}: {key}: {p} is not a mapping")
        node[leaf] = value
    config = parse_config(data, str(path))
    if "budget.deadline_ms" in overrides:
        own = {ep: getattr(config.endpoints, ep).deadline_ms for ep in ("livestream", "chat")}
        if all(v is not None for v in own.values()):
            governing = " and ".join(f"endpoints.{ep}.deadline_ms ({v})" for ep, v in own.items())
            raise ConfigError(
                f"{path}: budget.deadline_ms: no endpoint uses it, because {governing} are set and govern; "
                "set those instead, or set one to null to use budget.deadline_ms"
            )
    return config
