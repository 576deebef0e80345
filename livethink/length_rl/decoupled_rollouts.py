"""Decoupled rollouts in ``LengthRLTrainer``: thin glue between TRL's server-mode generation and the pure
``decoupled`` pieces.

``DecoupledRollouts.install`` replaces the trainer's ``vllm_generation.generate`` (TRL's server mode, text prompts)
by one that takes the batch from the ``RolloutPrefetcher`` and then queues the next window's prompts (read ahead from
the trainer's epoch iterator), and ``sync_weights`` by a reload queued on the prefetcher's worker (the weights are
written on the trainer thread first, so the reload pushes exactly that step's policy). Everything else — old
log-probs under the current policy, TRL's importance-sampling ratio against the server's behaviour log-probs, the
variant's rewards and loss — runs unchanged on the trainer thread.

With tail batching on too, the next window's round is not the next dataloader item alone: the trainer launches it
once this step's round has settled (``launch_rows``, with the rows and cap ``TailRollouts.peek`` planned), so short
rounds (with their extra prompts) and long rounds are both generated while the previous step trains.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from livethink.length_rl.decoupled import Lookahead, Payload, Request, RolloutPrefetcher

logger = logging.getLogger(__name__)


@contextmanager
def decoupled_server_client(cfg: Any):
    """Decoupled rollouts on CPU: TRL's server client is built without its NCCL communicator (CUDA only); the
    weights reach the server by a reload from disk (``vllm_sync.reload_server_weights``)."""
    import torch

    if getattr(cfg, "rollout_mode", "sync") != "decoupled" or (torch.cuda.is_available() and not cfg.use_cpu):
        yield
        return
    from livethink.length_rl.trl_compat import server_client_without_communicator

    with server_client_without_communicator():
        yield


class DecoupledRollouts:
    """Per-trainer state of ``rollout_mode: decoupled``."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.prefetcher = RolloutPrefetcher(trainer.args.max_staleness, self._generate_on_server)
        self.lookahead: Lookahead | None = None
        self.generation_batch: Any = None  # the dataloader item of the window being generated
        self.window = trainer.args.steps_per_generation * trainer.num_iterations  # dataloader items per window
        self.weights_dir = Path(trainer.args.output_dir) / "rollout_weights"
        self.reload_count = 0

    def install(self) -> None:
        from livethink.length_rl.trl_compat import replace_vllm_generate, replace_weight_sync

        generation = self.trainer.vllm_generation
        self.trl_sync = generation.sync_weights  # TRL's own (NCCL weight transfer), used on GPUs
        replace_vllm_generate(generation, self.generate)
        replace_weight_sync(generation, lambda _: self.sync())

    def wrap_iterator(self, epoch_iterator: Any) -> Lookahead:
        """The trainer's epoch iterator, readable one window ahead (one ``Lookahead`` per epoch)."""
        if self.lookahead is None or self.lookahead.source is not epoch_iterator:
            self.lookahead = Lookahead(epoch_iterator)
        return self.lookahead

    # ----- weight sync: on CPU written now and reloaded on the worker in queue order; on GPUs TRL's NCCL transfer
    # once the worker ran its queue (the prefetch generated with the old weights is kept)
    def sync(self) -> None:
        from livethink.length_rl.vllm_sync import write_server_weights

        trainer = self.trainer
        version = trainer.state.global_step
        if trainer.accelerator.device.type != "cpu":
            if trainer.accelerator.is_main_process:
                self.prefetcher.flush()
            self.trl_sync()
            self.prefetcher.version = version
            return
        folder = self.weights_dir / f"slot{self.reload_count % 2}"  # two slots: the one being read is never rewritten
        self.reload_count += 1
        main = trainer.accelerator.is_main_process
        write_server_weights(trainer.vllm_generation, folder if main else None)  # every process joins the gathers
        if main:
            from livethink.length_rl.vllm_sync import reload_server_weights

            client = trainer.vllm_generation.vllm_client
            self.prefetcher.sync(version, lambda: reload_server_weights(client, folder))

    # ----- generation
    def _request(self, unique_prompts: list[list[int]], num_generations: int, cap: int | None = None) -> Request:
        cap = self.trainer.vllm_generation.max_completion_length if cap is None else cap
        return Request(tuple(map(tuple, unique_prompts)), num_generations, cap)

    def _generate_on_server(self, request: Request) -> Payload:
        """TRL's server-mode sampling request for ``request`` (runs on the prefetcher's worker thread)."""
        generation = self.trainer.vllm_generation
        out = generation.vllm_client.generate(
            prompts=[list(p) for p in request.prompts], n=request.n, repetition_penalty=generation.repetition_penalty,
            temperature=generation.temperature, top_p=generation.top_p, top_k=generation.top_k,
            min_p=0.0 if generation.min_p is None else generation.min_p, max_tokens=request.cap,
            logprobs=generation.logprobs, structured_outputs_regex=generation.structured_outputs_regex,
            generation_kwargs=generation.generation_kwargs)
        return out["prompt_ids"], out["completion_ids"], out["logprobs"], out.get("logprob_token_ids")

    def generate(self, prompts: list[list[int]], images: Any, num_generations: int, profiler: Any = None) -> tuple:
        """TRL's server-mode ``VLLMGeneration.generate`` (same inputs and outputs), served by the prefetcher."""
        from accelerate.utils import broadcast_object_list, gather_object

        if images is not None and any(image is not None for image in images):
            raise ValueError("rollout_mode: decoupled generates text prompts only (this batch has images)")
        trainer, accelerator = self.trainer, self.trainer.accelerator
        all_prompts = gather_object(prompts)
        unique = all_prompts[::num_generations]
        message: list[Any] = [None]
        if accelerator.is_main_process:
            taken = self.prefetcher.take(self._request(unique, num_generations), trainer.state.global_step)
            message = [(taken.payload, taken.staleness, taken.hit, taken.wait_s)]
        broadcast_object_list(message, from_process=0)
        (prompt_ids, completion_ids, logprobs, token_ids), staleness, hit, wait_s = message[0]
        if trainer.model.training:
            trainer.log_metric("decoupled/staleness", staleness)
            trainer.log_metric("decoupled/hit", float(hit))
            trainer.log_metric("decoupled/wait_s", wait_s)
            trainer.log_metric("decoupled/idle_share", self.prefetcher.idle_share(wait_s))
            if trainer.tail is None:  # with tail batching the trainer launches the planned round (launch_rows)
                self._launch_next(num_generations)
        all_prompt_ids = [ids for ids in prompt_ids for _ in range(num_generations)]
        rows = slice(accelerator.process_index * len(prompts), (accelerator.process_index + 1) * len(prompts))
        return (all_prompt_ids[rows], completion_ids[rows], logprobs[rows] if logprobs is not None else None,
                token_ids[rows] if token_ids is not None else None)

    def _launch_next(self, num_generations: int) -> None:
        """Queue the next window's generation (all processes gather its prompts; the main process queues it)."""
        rows = self.next_rows()
        self._launch(None if rows is None else self._prompt_ids(rows), num_generations, None)

    def launch_rows(self, rows: list[dict[str, Any]] | None, cap: int) -> None:
        """Queue the generation of the next round's ``rows`` (this process's, ``None`` at the end of the epoch) at
        ``cap``: the round tail batching planned (every process calls it)."""
        self._launch(None if rows is None else self._prompt_ids(rows), self.trainer.num_generations, cap)

    def _launch(self, local: list[list[int]] | None, num_generations: int, cap: int | None) -> None:
        from accelerate.utils import gather_object

        gathered = gather_object([local])
        if not self.trainer.accelerator.is_main_process or any(p is None for p in gathered):
            return
        unique = [ids for part in gathered for ids in part][::num_generations]
        self.prefetcher.launch(self._request(unique, num_generations, cap))

    def next_rows(self) -> list[dict[str, Any]] | None:
        """The next window's dataloader rows (this process's), None at the end of the epoch."""
        if self.lookahead is None or self.generation_batch is None:
            return None
        index = self.lookahead.index_of(self.generation_batch)
        return None if index is None else self.lookahead.peek(index + self.window)

    def _prompt_ids(self, rows: list[dict[str, Any]]) -> list[list[int]]:
        from livethink.length_rl.trl_compat import tokenize_prompts

        return tokenize_prompts(self.trainer, [row["prompt"] for row in rows])

    def close(self) -> None:
        """After training: drop an unclaimed prefetch once the worker ran its queue."""
        self.prefetcher.close()
