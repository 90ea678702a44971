"""Generated text for the tiny tokenizer's corpus: prose, markdown, code, tool calls and unicode (seeded)."""

from __future__ import annotations

import json
import random


def generated_text(seed: int = 1234) -> list[str]:
    """The generated part of the tokenizer corpus, the same for a given ``seed``."""
    rng = random.Random(seed)
    texts = [_sentence(rng) for _ in range(3000)]
    texts += [_markdown(rng) for _ in range(300)]
    texts += [_code(rng) for _ in range(300)]
    texts += [_tool_call(rng) for _ in range(300)]
    texts += ["".join(chr(rng.randrange(32, 0x250)) for _ in range(40)) for _ in range(50)]
    texts += [" ".join(rng.choice(_UNICODE_WORDS) for _ in range(8)) for _ in range(100)]
    return texts


_WORD_LIST = (
    "the a an and or but if then so because when while after before with without for to of in on at by from "
    "is are was were be been has have had do does did can could will would should may might must not no yes "
    "I you he she it we they me him her us them my your his its our their this that these those there here "
    "what which who how why where time day week year today tomorrow morning evening apple apples orange "
    "bananas cookies books pencils marbles stickers cards coins dollars cents bus train car bike miles hours "
    "minutes students teacher class school homework problem answer question solution step steps total each "
    "every more less than twice half third quarter left remaining altogether together gives buys sells shares "
    "splits earns spends saves has gets eats makes reads runs walks bakes packs boxes bags baskets rows "
    "garden tree trees flowers cups bottles friends family mom dad sister brother Sam Mia Leo Ava Ben Zoe "
    "number numbers plus minus times divided equals sum difference product quotient price cost pay change "
    "great good nice thanks thank please sorry okay sure right wrong correct mistake check again really "
    "think know see look like want need help explain show write tell say ask try find work working nicely "
    "file code test tests run output error result value list string function return print import python "
    "first second third next last final finally also just only very quite pretty really simple easy hard"
)
_WORDS = _WORD_LIST.split()
_UNICODE_WORDS = ("café", "naïve", "über", "résumé", "中文", "日本語", "😀", "🎉", "👍", "✨", "Ω", "π≈3.14", "€5", "→")


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 18))]
    text = " ".join(words)
    text = text[0].upper() + text[1:]
    if rng.random() < 0.5:
        text += f" {rng.randint(0, 999)} {rng.choice(['+', '-', '*', '/', '='])} {rng.randint(0, 99)}"
    return text + rng.choice([".", "!", "?", ".", "\n"])


def _markdown(rng: random.Random) -> str:
    lines = [f"## {_sentence(rng).rstrip('.!?')}"]
    for k in range(1, rng.randint(2, 5)):
        lines.append(f"**Step {k}:** {_sentence(rng)}")
    lines.append(f"- {_sentence(rng)}\n- {_sentence(rng)}")
    lines.append(f"**Answer:** {rng.randint(0, 500)}")
    return "\n".join(lines)


def _code(rng: random.Random) -> str:
    a, b = rng.randint(0, 99), rng.randint(1, 99)
    name = rng.choice(["total", "count", "x", "result", "value", "n"])
    return (
        f"def solve({name}):\n    for i in range({a}):\n        {name} += i * {b}\n    return {name}\n\n"
        f"print(solve({b}))\nimport math\nprint(math.sqrt({a}) + {b} // 3, [{a}, {b}], {{'k': {a}}})\n"
    )


def _tool_call(rng: random.Random) -> str:
    code = f"print({rng.randint(0, 999)} * {rng.randint(0, 999)} + {rng.randint(0, 99)})"
    call = json.dumps({"name": "python", "arguments": {"code": code}})
    return f"<tool_call>\n{call}\n</tool_call>\n<tool_response>\n{rng.randint(0, 99999)}\n</tool_response>"
