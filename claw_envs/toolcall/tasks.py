"""Math problems for ``claw/ToolCall-v0``: named benchmarks, files with a field mapping, and a built-in set.

Every task's ``data`` has ``question`` and ``answer`` (a string) plus ``source``; the built-in set also
has ``code``, a program that prints the answer (for scripted agents and demonstrations).

* Named (from the Hugging Face hub through ``datasets``, only when asked): ``aime2024``
  (``HuggingFaceH4/aime_2024``, 30 problems), ``dapo-math`` (``BytedTsinghua-SIA/DAPO-Math-17k``, its
  repeated rows dropped by ``extra_info.index`` before any task is built), ``gsm8k`` (``openai/gsm8k``
  test split, the number after ``####``). Without the hub (offline, or its host not answering) a name fails at
  once, naming the local file of the same rows that works instead (``NamedDataset.local``; :mod:`claw_envs.hub`).
* A JSONL or parquet path, with an optional field mapping after ``#``: ``data.jsonl#question=problem,
  answer=final,id=uid`` (ours=theirs; a dotted name reaches into a nested field: ``answer=reward_model.
  ground_truth``). Without one, ``question`` is the first of problem/question/prompt/query, ``answer`` the first
  of answer/final_answer/ground_truth/target, else the last ``\\boxed{}`` of ``solution``.
* ``builtin``: procedural arithmetic that needs the tool (big products, long sums, modular powers,
  digit sums of factorials); train and test come from disjoint seed ranges.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from claw_envs.hub import load_hub_dataset
from claw_envs.tasks import ProceduralTasks, Task, TaskList, TaskSource, load_jsonl, load_rows
from claw_envs.toolcall.boxed import last_boxed

SEEDS = {"train": range(0, 1_000_000), "test": range(1_000_000, 1_010_000)}
QUESTION_FIELDS = ("question", "problem", "prompt", "query")
ANSWER_FIELDS = ("answer", "final_answer", "ground_truth", "target")


@dataclass(frozen=True)
class NamedDataset:
    """Where a named benchmark lives on the hub and how its rows become tasks.

    ``id_field`` (dotted for nested fields) names each task ``<name>-<value>``, else ``<name>-<row>``;
    rows repeating an earlier ``id_field`` value are dropped (DAPO-Math repeats each problem ~100 times).
    """

    hf_id: str
    hf_split: str
    clean: Callable[[Mapping[str, Any]], dict[str, Any]]
    config: str | None = None
    id_field: str | None = None
    local: str = ""
    """The ``--tasks`` value that reads a local file of the same rows (its field mapping), and a row's shape."""


def gsm8k_answer(solution: str) -> str:
    """The final number of a GSM8K solution (after ``####``, thousands separators removed)."""
    return solution.rsplit("####", 1)[-1].strip().replace(",", "")


def dapo_question(prompt: Any) -> str:
    """The problem inside a DAPO-Math prompt (a chat list), without its answer-format instructions."""
    text = prompt[0]["content"] if isinstance(prompt, list | tuple) and prompt else str(prompt)
    text = re.sub(r"^\s*Solve the following math problem.*?\n\s*\n", "", text, count=1, flags=re.S)
    text = re.sub(r"\n\s*\n\s*Remember to put your answer.*$", "", text, count=1, flags=re.S)
    return text.strip()


def _clean_aime(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"question": str(row["problem"]), "answer": str(row["answer"]).strip(), "source": "aime2024"}


def _clean_dapo(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "question": dapo_question(row["prompt"]),
        "answer": str(row["reward_model"]["ground_truth"]).strip(),
        "source": "dapo-math",
    }


def _clean_gsm8k(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"question": str(row["question"]), "answer": gsm8k_answer(str(row["answer"])), "source": "gsm8k"}


NAMED: dict[str, NamedDataset] = {
    "aime2024": NamedDataset(
        "HuggingFaceH4/aime_2024",
        "train",
        _clean_aime,
        id_field="id",
        local="aime_2024.jsonl#question=problem,answer=answer,id=id "
        '(rows as on the hub: {"id": 60, "problem": "...", "answer": "204"})',
    ),
    "dapo-math": NamedDataset(
        "BytedTsinghua-SIA/DAPO-Math-17k",
        "train",
        _clean_dapo,
        id_field="extra_info.index",
        local="dapo.jsonl#question=prompt,answer=reward_model.ground_truth,id=extra_info.index (the hub's rows: "
        '{"prompt": [{"role": "user", "content": "..."}], "reward_model": {"ground_truth": "34"}, '
        '"extra_info": {"index": "..."}})',
    ),
    "gsm8k": NamedDataset(
        "openai/gsm8k",
        "test",
        _clean_gsm8k,
        config="main",
        local='gsm8k_test.jsonl#question=question,answer=answer (rows {"question": "...", "answer": "... #### 72"})',
    ),
}


def load_dataset(name_or_path: str, *, split: str = "test", limit: int | None = None) -> TaskSource:
    """Tasks for ``name_or_path``: a name in :data:`NAMED`, ``builtin``, or a JSONL/parquet path (see above).

    ``split`` tags the tasks (and picks the built-in seed range); ``limit`` keeps the first tasks only.
    """
    if name_or_path == "builtin":
        source: TaskSource = builtin_tasks(split)
        if limit is None:
            return source
        return TaskList(list(itertools.islice(source, limit)), split)
    tasks = _load_named(name_or_path, split) if name_or_path in NAMED else load_file(name_or_path, split=split)
    return tasks if limit is None else TaskList(list(tasks)[:limit], split)


def load_file(spec: str, *, split: str = "test") -> TaskList:
    """Tasks from ``path[#ours=theirs,...]`` (JSONL or parquet); see the module docstring for defaults."""
    path_text, _, mapping_text = spec.partition("#")
    path = Path(path_text)
    if not path.is_file():
        known = ", ".join([*NAMED, "builtin"])
        raise ValueError(f"dataset {path_text!r} is neither a known name ({known}) nor an existing file")
    ours_to_theirs = _parse_mapping(mapping_text)
    if path.suffix == ".parquet":
        import pandas as pd

        raw = load_rows(pd.read_parquet(path).to_dict("records"), split=split, prefix=path.stem)
    elif path.suffix in (".jsonl", ".json"):
        raw = load_jsonl(path, split=split, prefix=path.stem)
    else:
        raise ValueError(f"{path}: expected a .jsonl or .parquet file")
    id_field = ours_to_theirs.get("id", "id")
    tasks = []
    for i, task in enumerate(raw):
        data = _map_fields(task.data, ours_to_theirs, where=f"{path}: row {i + 1}")
        found = _has(task.data, id_field)
        if "id" in ours_to_theirs and not found:
            raise ValueError(f"{path}: row {i + 1}: no id field {id_field!r}")
        tid = str(_dotted(task.data, id_field)) if found else f"{path.stem}-{i}"
        tasks.append(Task(tid, split, data))
    return TaskList(tasks, split)


def builtin_tasks(split: str = "train") -> ProceduralTasks:
    """The procedural arithmetic set: ``arith-N`` is made from seed N; train and test seeds never overlap."""
    if split not in SEEDS:
        raise ValueError(f"the built-in toolcall set has splits {sorted(SEEDS)}, not {split!r}")
    return ProceduralTasks(make_arithmetic, SEEDS[split], split, "arith")


def make_arithmetic(seed: int) -> dict[str, Any]:
    """One problem that is tedious by hand and one line of Python, with the program that solves it."""
    rng = np.random.default_rng(seed)
    kind = ("product", "sum", "modpow", "digitsum")[seed % 4]
    if kind == "product":
        a, b = (int(rng.integers(10**11, 10**12)) for _ in range(2))
        question = f"What is {a} × {b}?"
        code = f"print({a} * {b})"
        answer = a * b
    elif kind == "sum":
        terms = [int(x) for x in rng.integers(1000, 99999, size=int(rng.integers(15, 25)))]
        question = f"What is the sum {' + '.join(map(str, terms))}?"
        code = f"print(sum({terms}))"
        answer = sum(terms)
    elif kind == "modpow":
        base, exp, mod = int(rng.integers(2, 10**6)), int(rng.integers(10**8, 10**12)), int(rng.integers(10**4, 10**7))
        question = f"What is the remainder when {base}^{exp} is divided by {mod}?"
        code = f"print(pow({base}, {exp}, {mod}))"
        answer = pow(base, exp, mod)
    else:
        n = int(rng.integers(150, 600))
        question = f"What is the sum of the decimal digits of {n}! ({n} factorial)?"
        code = f"import math\nprint(sum(int(d) for d in str(math.factorial({n}))))"
        answer = sum(int(d) for d in str(math.factorial(n)))
    return {"question": question, "answer": str(answer), "code": code, "kind": kind, "source": "builtin"}


# -- helpers -----------------------------------------------------------------------------------


def _load_named(name: str, split: str) -> TaskList:
    spec = NAMED[name]
    local = f"A local file of the same rows works in its place: --tasks {spec.local}."
    return tasks_from_hub_rows(name, load_hub_dataset(spec.hf_id, spec.config, spec.hf_split, local_form=local), split)


def tasks_from_hub_rows(name: str, ds: Any, split: str) -> TaskList:
    """Tasks of the named dataset ``name`` from its hub rows (a ``datasets.Dataset``), de-duplicated by id."""
    spec = NAMED[name]
    if spec.id_field is not None:
        keys = ds.flatten().select_columns([spec.id_field]).to_pandas()[spec.id_field]
        ds = ds.select(np.flatnonzero(~keys.astype(str).duplicated().to_numpy()))
    tasks = []
    for i, task in enumerate(load_rows(ds, split=split, prefix=name)):
        suffix = _dotted(task.data, spec.id_field) if spec.id_field else i
        tasks.append(Task(f"{name}-{suffix}", split, spec.clean(task.data)))
    return TaskList(tasks, split)


def _dotted(row: Mapping[str, Any], path: str) -> Any:
    value: Any = row
    for part in path.split("."):
        value = value[part]
    return value


def _has(row: Mapping[str, Any], path: str) -> bool:
    """Whether ``row`` has the field ``path`` (dotted for nested fields; a name with a dot of its own counts too)."""
    if path in row:
        return True
    try:
        _dotted(row, path)
    except (KeyError, TypeError, IndexError):
        return False
    return True


def _parse_mapping(text: str) -> dict[str, str]:
    mapping = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        ours, sep, theirs = part.partition("=")
        if not sep or not ours.strip() or not theirs.strip():
            raise ValueError(f"bad field mapping {part!r}: write ours=theirs, e.g. question=problem")
        if ours.strip() not in ("question", "answer", "id"):
            raise ValueError(f"bad field mapping {part!r}: the fields are question, answer and id")
        mapping[ours.strip()] = theirs.strip()
    return mapping


def _map_fields(row: Mapping[str, Any], ours_to_theirs: Mapping[str, str], where: str) -> dict[str, Any]:
    question = _pick(row, ours_to_theirs.get("question"), QUESTION_FIELDS, where, "question")
    if "answer" in ours_to_theirs or any(f in row for f in ANSWER_FIELDS):
        answer = str(_pick(row, ours_to_theirs.get("answer"), ANSWER_FIELDS, where, "answer"))
    elif "solution" in row and last_boxed(str(row["solution"])) is not None:
        answer = last_boxed(str(row["solution"])) or ""
    else:
        raise ValueError(f"{where}: no answer field (tried {', '.join(ANSWER_FIELDS)}, a boxed solution)")
    if "####" in answer:
        answer = gsm8k_answer(answer)
    if isinstance(question, list | tuple):
        question = dapo_question(question)
    return {"question": str(question), "answer": answer.strip(), "source": "file"}


def _pick(row: Mapping[str, Any], named: str | None, candidates: tuple[str, ...], where: str, what: str) -> Any:
    if named is not None:
        if not _has(row, named):
            raise ValueError(f"{where}: no field {named!r} for the {what} (fields: {', '.join(sorted(row))})")
        return row[named] if named in row else _dotted(row, named)
    for name in candidates:
        if name in row:
            return row[name]
    raise ValueError(f"{where}: no {what} field (tried {', '.join(candidates)}; map one with #{what}=FIELD)")
