"""ProcessGRPOTrainer with `use_vllm: true, vllm_mode: server` (a `trl vllm-serve` server), against a fake client.

No server runs here: TRL's `VLLMClient` (trl/generation/vllm_client.py, TRL 1.16) is replaced, while the trainer is
built, by `FakeVLLMClient`, which has the methods TRL's server path calls (`get_server_info`, `init_communicator`,
`generate`, `update_named_params`, `reset_prefix_cache`) with the real signatures and return shapes. The fake
"server" holds its own tiny Llama (different initial weights from the policy); `update_named_params` loads the
streamed tensors into it and `generate` returns fixed pseudo-random completions (EOS-terminated or cut at
`max_tokens`) with that model's log-probs at the requested temperature, as a server running
`--logprobs-mode processed_logprobs` would for plain temperature sampling.

What is verified (everything on the trainer side of the HTTP/NCCL boundary, TRL's own request code included):
- the trainer builds in server mode (TRL's `VLLMGeneration._init_vllm` makes the client with the configured URL,
  group port and timeout, and calls `init_communicator(device=accelerator.device)`; TRL asks `get_server_info` for
  the logprobs mode);
- one `generate` call per step carrying the unique prompts (token ids, `all_prompts[::num_generations]`),
  `n=num_generations` and TRL's sampling fields (repetition_penalty, temperature, top_p, top_k, min_p,
  max_tokens=max_completion_length, logprobs=0, structured_outputs_regex, generation_kwargs);
- `ProcessRollout` returns the fake's prompt ids (one row per completion), completion ids and top-1 log-probs
  unchanged, and, for a simulated 2-process run, each rank gets its own slice of the server's rows;
- `completion_logps` (what the reward functions get) equal an independent unpadded policy forward at T = 1
  (the server-mode rescoring path, `procrl.trainers.rollout.policy_logps`), within 1e-4;
- the weight sync runs before each step's generation whose global_step changed (steps 0 and 1), through
  `update_named_params` with metadata and tensors for every policy parameter (names, dtypes, shapes), the values
  being the policy's after the optimizer step, followed by `reset_prefix_cache`; TRL's importance-sampling metrics
  (policy vs the fake server's log-probs) then show the server held the current weights at both steps.

What is NOT verified: a real `trl vllm-serve` process, the HTTP payloads, vLLM's sampling, the NCCL weight-transfer
communicator (the real `init_communicator` refuses a non-CUDA device), multi-GPU / multi-node runs (the 2-process
case replaces TRL's gather/broadcast collectives by stand-ins), the server's handling of a tied LM head (the
trainer streams `named_parameters()`, where a tied head appears once, as the input embedding), and search episodes
(refused in server mode).
"""

from __future__ import annotations

import types

import pytest
import torch
import trl.generation.vllm_generation as trl_vllm_generation
from datasets import Dataset
from grpo_helpers import grpo_config, max_diff, temperature_logps

import procrl.trainers.vllm_colocate as vllm_colocate
from procrl.generation import render_prompts
from procrl.rewards.outcome import outcome_reward
from procrl.trainers.rollout import ProcessRollout

QUESTIONS = [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8")]
NUM_GENERATIONS = 2
MAX_TOKENS = 8
SAMPLING = dict(temperature=0.7, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.1)
GENERATION_KWARGS = {"presence_penalty": 0.1}


class FakeVLLMClient:
    """`trl.generation.vllm_client.VLLMClient` without a server (see the module docstring); records every call."""

    instances: list[FakeVLLMClient] = []
    server_model = None  # set by the fixture: the fake server's weights
    eos_id: int = 2

    def __init__(self, base_url=None, host="0.0.0.0", server_port=8000, group_port=51216, connection_timeout=0.0):
        self.init_args = {"base_url": base_url, "group_port": group_port, "connection_timeout": connection_timeout}
        self.communicator_device = None
        self.generate_calls: list[dict] = []
        self.outputs: list[dict] = []
        self.weight_updates: list[tuple[list, list]] = []
        self.prefix_resets = 0
        FakeVLLMClient.instances.append(self)

    def get_server_info(self) -> dict:
        return {"model_config": {"logprobs_mode": "processed_logprobs"}, "weight_transfer_config": {"backend": "nccl"}}

    def init_communicator(self, device=0):
        self.communicator_device = device

    def generate(
        self,
        prompts,
        features=None,
        n=1,
        repetition_penalty=1.0,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        min_p=0.0,
        max_tokens=16,
        logprobs=0,
        structured_outputs_regex=None,
        generation_kwargs=None,
    ) -> dict:
        call = len(self.generate_calls)
        self.generate_calls.append(
            dict(
                prompts=[list(p) for p in prompts],
                features=features,
                n=n,
                repetition_penalty=repetition_penalty,
                temperature=temperature,
                top_p=top_p,
                top_k=top_k,
                min_p=min_p,
                max_tokens=max_tokens,
                logprobs=logprobs,
                structured_outputs_regex=structured_outputs_regex,
                generation_kwargs=generation_kwargs,
            )
        )
        prompt_rows, completion_ids = [], []
        for i, prompt in enumerate(prompts):  # prompt-major, n completions each, as the real client returns them
            for j in range(n):
                length = min(max_tokens, (max_tokens, 3, 5, 2, 7, 4)[(n * i + j + call) % 6])
                generator = torch.Generator().manual_seed(1000 * call + 10 * i + j)
                ids = torch.randint(3, 1000, (length,), generator=generator).tolist()
                if length < max_tokens:
                    ids[-1] = self.eos_id
                prompt_rows.append(list(prompt))
                completion_ids.append(ids)
        logps = temperature_logps(self.server_model, prompt_rows, completion_ids, temperature)
        out = {
            "prompt_ids": [list(p) for p in prompts],
            "completion_ids": completion_ids,
            "logprobs": [[[lp] for lp in row] for row in logps],
            "logprob_token_ids": [[[t] for t in row] for row in completion_ids],
        }
        self.outputs.append(out)
        return out

    def update_named_params(self, metadata, named_params):
        tensors = [(name, tensor.detach().clone()) for name, tensor in named_params]
        self.weight_updates.append((list(metadata), tensors))
        result = self.server_model.load_state_dict(dict(tensors), strict=False)
        assert not result.unexpected_keys and set(result.missing_keys) <= {"lm_head.weight"}  # tied to the embedding

    def reset_prefix_cache(self):
        self.prefix_resets += 1


def token_parity(completion_ids, **kwargs):
    """A reward that differs between completions (the outcome reward is 0 for all: no gradient)."""
    return [sum(t % 2 for t in ids) / len(ids) for ids in completion_ids]


@pytest.fixture(scope="module")
def server_trainer(tmp_path_factory, smollm2_tokenizer, tiny_llama_factory):
    """A ProcessGRPOTrainer in server mode, built with `FakeVLLMClient` in place of TRL's client (and vLLM's
    availability checks answered yes, so no vLLM install is needed), plus what its reward function recorded."""
    from procrl.trainers.grpo import ProcessGRPOTrainer

    FakeVLLMClient.instances = []
    FakeVLLMClient.server_model = tiny_llama_factory(len(smollm2_tokenizer), seed=1)
    FakeVLLMClient.eos_id = smollm2_tokenizer.eos_token_id
    seen = {"rewards": []}

    def recorder(prompts, completion_ids, completion_logps, **kwargs):
        policy = seen["trainer"].accelerator.unwrap_model(seen["trainer"].model)
        prompt_ids = render_prompts(smollm2_tokenizer, prompts, None)
        expected = temperature_logps(policy, prompt_ids, completion_ids, 1.0)
        seen["rewards"].append(([list(r) for r in completion_ids], [list(r) for r in completion_logps], expected))
        return [0.0] * len(completion_ids)

    side = smollm2_tokenizer.padding_side
    smollm2_tokenizer.padding_side = "left"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trl_vllm_generation, "VLLMClient", FakeVLLMClient)
        patch.setattr(trl_vllm_generation, "is_vllm_available", lambda *a, **k: True)
        patch.setattr(vllm_colocate, "import_vllm", lambda: None)
        args = grpo_config(
            tmp_path_factory.mktemp("grpo-server-out"),
            generation_backend="vllm",
            vllm_mode="server",
            num_generations=NUM_GENERATIONS,
            max_completion_length=MAX_TOKENS,
            max_steps=2,
            learning_rate=5e-2,
            generation_kwargs=GENERATION_KWARGS,
            **SAMPLING,
        )
        rows = [{"prompt": [{"role": "user", "content": q}], "answer": a} for q, a in QUESTIONS] * 2
        trainer = ProcessGRPOTrainer(
            model=tiny_llama_factory(len(smollm2_tokenizer)),
            reward_funcs=[outcome_reward, token_parity, recorder],
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=smollm2_tokenizer,
        )
    seen["trainer"] = trainer
    yield trainer, seen
    smollm2_tokenizer.padding_side = side


def test_trainer_builds_against_the_server(server_trainer):
    trainer, _ = server_trainer
    assert trainer.use_vllm and trainer.vllm_mode == "server" and trainer.args.generation_backend == "vllm"
    (client,) = FakeVLLMClient.instances
    assert trainer.vllm_generation.vllm_client is client
    assert client.init_args == {"base_url": "http://0.0.0.0:8000", "group_port": 51216, "connection_timeout": 240.0}
    assert client.communicator_device == trainer.accelerator.device
    assert not hasattr(trainer.vllm_generation, "llm")  # no local engine in server mode


def test_search_episodes_are_refused_in_server_mode(server_trainer):
    trainer, _ = server_trainer
    with pytest.raises(NotImplementedError, match="vllm_mode: colocate"):
        ProcessRollout(env=object())([[{"role": "user", "content": "q"}]], trainer)


@pytest.mark.parametrize("rank", [0, 1])
def test_each_process_gets_its_slice_of_the_server_rows(server_trainer, monkeypatch, smollm2_tokenizer, rank):
    """Two processes: TRL gathers both ranks' prompts, the main process asks the server once, each rank keeps its
    rows (vllm_generation.py:581-640). The collectives are stand-ins: gather = rank 0's rows + rank 1's rows."""
    trainer, _ = server_trainer
    client = trainer.vllm_generation.vllm_client
    trainer.model.train()
    mine = [[{"role": "user", "content": q}] for q, _ in QUESTIONS for _ in range(NUM_GENERATIONS)]
    other = [
        [{"role": "user", "content": q}] for q in ("What is 1 + 1?", "What is 6 + 1?") for _ in range(NUM_GENERATIONS)
    ]
    mine_ids, other_ids = render_prompts(smollm2_tokenizer, mine, None), render_prompts(smollm2_tokenizer, other, None)
    all_ids = other_ids + mine_ids if rank == 1 else mine_ids + other_ids
    if rank == 1:  # rank 0 asked the server; rank 1 receives its answer through the broadcast
        answer = client.generate(prompts=all_ids[::NUM_GENERATIONS], n=NUM_GENERATIONS, max_tokens=MAX_TOKENS)

        def broadcast(objects, from_process=0):
            assert objects == [None] and from_process == 0
            objects[0] = (answer["prompt_ids"], answer["completion_ids"], answer["logprobs"], None)

        monkeypatch.setattr(trl_vllm_generation, "broadcast_object_list", broadcast)
    calls_before = len(client.generate_calls)

    def gather(rows):  # TRL gathers the prompt ids, then the images (None per row)
        return list(all_ids) if rows[0] is not None else [None] * len(all_ids)

    monkeypatch.setattr(trl_vllm_generation, "gather_object", gather)
    monkeypatch.setattr(
        trainer.vllm_generation,
        "accelerator",
        types.SimpleNamespace(process_index=rank, is_main_process=rank == 0, num_processes=2, device="cpu"),
    )
    out = trainer.rollout_func(mine, trainer)
    if rank == 0:
        assert len(client.generate_calls) == calls_before + 1
        assert client.generate_calls[-1]["prompts"] == all_ids[::NUM_GENERATIONS]
        answer = client.outputs[-1]
    else:
        assert len(client.generate_calls) == calls_before  # only the main process talks to the server
    rows = slice(rank * len(mine), (rank + 1) * len(mine))  # every rank holds as many rows (TRL's sampler)
    assert out["prompt_ids"] == mine_ids
    assert out["completion_ids"] == answer["completion_ids"][rows]
    assert out["logprobs"] == [[lp[0] for lp in row] for row in answer["logprobs"][rows]]
    policy = trainer.accelerator.unwrap_model(trainer.model)
    expected = temperature_logps(policy, mine_ids, out["completion_ids"], 1.0)
    assert max_diff(out["completion_logps"], expected) < 1e-4


@pytest.fixture(scope="module")
def trained(server_trainer):
    """Two GRPO steps; records each sync (global_step, the policy's parameters then) and each rollout output."""
    trainer, seen = server_trainer
    client = trainer.vllm_generation.vllm_client
    client.generate_calls.clear(), client.outputs.clear(), client.weight_updates.clear(), seen["rewards"].clear()
    client.prefix_resets = 0
    records = {"syncs": [], "rollouts": []}
    sync, rollout = trainer.vllm_generation.sync_weights, trainer.rollout_func

    def recorded_sync():
        params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        records["syncs"].append((trainer.state.global_step, params))
        sync()

    def recorded_rollout(prompts, trainer_):
        out = rollout(prompts, trainer_)
        records["rollouts"].append(out)
        return out

    trainer.vllm_generation.sync_weights, trainer.rollout_func = recorded_sync, recorded_rollout
    try:
        trainer.train()
    finally:
        trainer.vllm_generation.sync_weights, trainer.rollout_func = sync, rollout
    # snapshots: later tests of the module may call the client again
    records.update(
        calls=list(client.generate_calls),
        outputs=list(client.outputs),
        updates=list(client.weight_updates),
        resets=client.prefix_resets,
        rewards=list(seen["rewards"]),
    )
    return records


@pytest.mark.slow  # trains
def test_one_generate_request_per_step_with_trl_sampling_fields(server_trainer, trained):
    trainer, _ = server_trainer
    assert trainer.state.global_step == 2 and len(trained["calls"]) == len(trained["rollouts"]) == 2
    for call, out in zip(trained["calls"], trained["rollouts"], strict=True):
        assert call["prompts"] == out["prompt_ids"][::NUM_GENERATIONS]  # the unique prompts, once each
        assert len({tuple(p) for p in call["prompts"]}) == len(call["prompts"]) == 2
        assert {k: v for k, v in call.items() if k != "prompts"} == {
            "features": None,
            "n": NUM_GENERATIONS,
            **SAMPLING,
            "max_tokens": MAX_TOKENS,
            "logprobs": 0,
            "structured_outputs_regex": None,
            "generation_kwargs": GENERATION_KWARGS,
        }


@pytest.mark.slow  # trains
def test_rollout_passes_the_server_rows_through_and_rescores_on_the_policy(server_trainer, trained):
    trainer, _ = server_trainer
    client = trainer.vllm_generation.vllm_client
    for answer, out in zip(trained["outputs"], trained["rollouts"], strict=True):
        assert out["prompt_ids"] == [p for p in answer["prompt_ids"] for _ in range(NUM_GENERATIONS)]
        assert out["completion_ids"] == answer["completion_ids"]
        assert out["logprobs"] == [[lp[0] for lp in row] for row in answer["logprobs"]]
    assert any(ids[-1] != client.eos_id for out in trained["rollouts"] for ids in out["completion_ids"])  # truncated
    assert len(trained["rewards"]) == 2
    for (ids, logps, expected), out in zip(trained["rewards"], trained["rollouts"], strict=True):
        assert ids == out["completion_ids"] and logps == out["completion_logps"]
        assert max_diff(logps, expected) < 1e-4


@pytest.mark.slow  # trains
def test_weights_go_through_update_named_params_after_each_optimizer_step(server_trainer, trained):
    trainer, _ = server_trainer
    assert [step for step, _ in trained["syncs"]] == [0, 1]
    assert len(trained["updates"]) == 2 and trained["resets"] == 2
    names = [n for n, _ in trainer.model.named_parameters()]
    for (metadata, tensors), (_, params) in zip(trained["updates"], trained["syncs"], strict=True):
        assert [name for name, _ in tensors] == [name for name, _, _ in metadata] == names
        assert [(dtype, shape) for _, dtype, shape in metadata] == [("float32", list(params[n].shape)) for n in names]
        assert all(torch.equal(tensor, params[name]) for name, tensor in tensors)  # the policy's values at the sync
    before, after = (dict(tensors) for _, tensors in trained["updates"])
    assert any(not torch.equal(before[n], after[n]) for n in names)  # step 1's sync carries the optimizer's update
    for logs in trainer.state.log_history[:2]:  # TRL's IS correction saw the server's log-probs of current weights
        assert logs["sampling/sampling_logp_difference/max"] < 1e-4
        assert abs(logs["sampling/importance_sampling_ratio/mean"] - 1) < 1e-4
        assert "loss" in logs
