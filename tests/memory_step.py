"""One trainer update on ROWS (even) rows of LENGTH tokens within a micro-batch budget of one row, in a fresh process:
prints the resident memory the update added at its peak, in MB (run by tests/test_trainer_memory.py)."""

from __future__ import annotations

import resource
import sys
import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from claw_train.samples.records import TrainSample, TurnRecord
from claw_train.training.trainer import ClawConfig, ClawTrainer, QueueSource

VOCAB, LENGTH = 8000, 1024


def resident_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**20


def main(rows: int) -> None:
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=LENGTH,
                         pad_token_id=0, eos_token_id=1, bos_token_id=1)  # fmt: skip
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"<pad>": 0, "<eos>": 1, "<unk>": 2}, unk_token="<unk>")),
        pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
    )  # fmt: skip
    source = QueueSource()
    generator = torch.Generator().manual_seed(1)
    for i in range(rows):  # as long as the context allows: half prompt, half completion
        prompt, completion = torch.randint(3, VOCAB, (2, LENGTH // 2), generator=generator).tolist()
        turn = TurnRecord(
            episode_id=f"e{i}", group_id="g", task_id="t", step_index=1, prompt_ids=prompt, completion_ids=completion,
            logprobs=[-9.0] * len(completion), policy_version=0, messages=[], action_text="",
        )  # fmt: skip
        source.put(TrainSample(turn=turn, advantages=[1.0] * len(completion), method="binary", sample_id=f"s{i}"))
    source.close()
    with tempfile.TemporaryDirectory() as out:
        args = ClawConfig.for_model(
            "tiny", out, max_steps=1, report_to="none", save_strategy="no", samples_per_step=rows,
            per_device_train_batch_size=rows, micro_batch_tokens=LENGTH,
        )  # fmt: skip
        trainer = ClawTrainer(Qwen3ForCausalLM(config), args, source=source, processing_class=tokenizer)
        before = resident_mb()
        trainer.train()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before)


if __name__ == "__main__":
    main(int(sys.argv[1]))
