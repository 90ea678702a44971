"""What a turn's log line holds for claw-view, with the tiny model's real tokenizer and no model: the prompt decoded
from its token ids (a later turn only its new tokens), a trained sample's per-token credit (text pieces that join
to the reply, the advantage, the teacher and behaviour log-probs), and a GUI turn's screenshot as a file."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("transformers")

from claw_envs.core import Evaluative, NextState
from claw_train.advantages import MethodSettings
from claw_train.runlog.decisions import DecisionLog
from claw_train.runlog.logs import VersionedLog, read_logs
from claw_train.runlog.metrics import Stats
from claw_train.runlog.turn_text import token_pieces
from claw_train.samples.making import SampleMaker
from claw_train.samples.records import TurnRecord
from claw_train.view.app import create_app
from claw_train.view.runs import RunIndex

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from claw_train.models.tiny import bootstrap

    return AutoTokenizer.from_pretrained(str(bootstrap("conversation", steps=2, progress=False)))


class _Judge:
    async def judge(self, action, next_state, messages):
        from judges.base import Judgement

        return Judgement(score=-1.0, hint="Next time, don't use any bold text.")


class _Policy:
    """The teacher's prefill: each token 0.5 more likely with the hint than without."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    async def logprobs(self, prompt_ids, completion_ids, **kwargs):
        return [-1.0] * len(completion_ids)


def _turns(tokenizer) -> list[TurnRecord]:
    first = tokenizer.apply_chat_template(
        [{"role": "user", "content": "héllo, what is 3 + 4?"}], add_generation_prompt=True, tokenize=False
    )
    prompt = tokenizer.encode(first, add_special_tokens=False)
    reply = tokenizer.encode("**7** → seven<|im_end|>", add_special_tokens=False)
    after = tokenizer.encode(
        "\n<|im_start|>user\nno bold!<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )
    second = prompt + reply + after
    ns = NextState("Don't use any bold text.", role="user", evaluative=Evaluative(-1.0), image=PNG)
    return [
        TurnRecord("ep1", "g", "t1", 1, prompt, reply, [-1.5] * len(reply), 0, [], "**7** → seven", next_state=ns),
        TurnRecord("ep1", "g", "t1", 2, second, reply, [-1.5] * len(reply), 0, [], "**7** → seven",
                   next_state=ns, prompt_start=len(prompt)),
    ]  # fmt: skip


def test_a_turn_logs_its_prompt_its_credit_and_its_screenshot(tokenizer, tmp_path):
    log = VersionedLog(tmp_path / "logs")
    settings = MethodSettings("combined")
    decisions = DecisionLog(log, settings, tokenizer=tokenizer)
    maker = SampleMaker(settings=settings, judge=_Judge(), policy=_Policy(tokenizer), stats=Stats(), log=decisions)
    turns = _turns(tokenizer)
    for turn in turns:
        [sample] = asyncio.run(maker.personal(turn))
    log.close()
    first, second = (r for r in read_logs(tmp_path / "logs") if r["kind"] == "turn")
    assert first["prompt"] == {
        "start": 0,
        "tokens": len(turns[0].prompt_ids),
        "text": tokenizer.decode(turns[0].prompt_ids),
    }
    assert second["prompt"]["start"] == len(turns[0].prompt_ids)  # only what the first turn's prompt lacked
    assert first["prompt"]["text"] + second["prompt"]["text"] == tokenizer.decode(turns[1].prompt_ids)
    credit = first["credit"]
    assert "".join(credit["pieces"]) == tokenizer.decode(turns[0].completion_ids)
    assert len(credit["pieces"]) == len(credit["advantage"]) == len(turns[0].completion_ids) == first["tokens"]
    assert credit["teacher"] == [-1.0] * first["tokens"] and credit["old"] == [-1.5] * first["tokens"]
    assert credit["advantage"] == pytest.approx([-1.0 + 0.5] * first["tokens"])  # w_rl·score + w_opd·(teacher − old)
    assert (credit["method"], credit["score"], credit["w_rl"], credit["w_opd"]) == ("combined", -1.0, 1.0, 1.0)
    assert sample.advantages == pytest.approx(credit["advantage"], abs=1e-4)
    assert first["next_state"]["image"] == "images/ep1-1.png"
    assert (tmp_path / "logs" / "images" / "ep1-1.png").read_bytes() == PNG
    assert maker.stats.totals()["episodes"] == 1  # one episode with logged turns, counted as claw-view counts it

    from fastapi.testclient import TestClient

    (tmp_path / "run.json").write_text(json.dumps({"env": "claw/Conversation-v0"}))
    index = RunIndex(tmp_path)
    index.refresh()
    client = TestClient(create_app([index]), base_url="http://127.0.0.1")
    served = client.get("/api/image", params={"run": 0, "path": "images/ep1-1.png"})
    assert served.status_code == 200 and served.content == PNG
    assert client.get("/api/image", params={"run": 0, "path": "../run.json"}).status_code == 400
    assert client.get("/api/image", params={"run": 0, "path": "images/none.png"}).status_code == 404
    detail = client.get("/api/turn", params={"run": 0, "n": 1}).json()
    assert "".join(p["text"] for p in detail["prompt"]["parts"]) == tokenizer.decode(turns[1].prompt_ids)


def test_token_pieces_hold_back_a_token_that_ends_inside_a_character(tokenizer):
    ids = tokenizer.encode("añb → c", add_special_tokens=False)
    pieces = token_pieces(tokenizer, ids)
    assert len(pieces) == len(ids) and "".join(pieces) == "añb → c"
    assert all("\ufffd" not in p for p in pieces)


def test_token_pieces_keep_a_reply_cut_off_inside_a_character(tokenizer):
    smile = tokenizer.encode("🙂", add_special_tokens=False)
    ids = tokenizer.encode("done ", add_special_tokens=False) + smile[:1]  # cut at the token limit mid-character
    whole = tokenizer.decode(ids)
    assert len(smile) > 1 and whole.endswith("\ufffd")  # the reply as logged shows the broken character
    pieces = token_pieces(tokenizer, ids)
    assert len(pieces) == len(ids) and "".join(pieces) == whole
