"""Loaders for BEIR-format and LoCoMo-format data."""

from __future__ import annotations

import csv
import gzip
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mnemex.errors import InvalidInput
from mnemex.records import dataclass


def _open_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InvalidInput(f"{path}:{number}: not valid JSON ({exc.msg})") from None


def _find(directory: Path, name: str) -> Path:
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.exists():
            return candidate
    raise InvalidInput(f"{directory} has no {name} (or {name}.gz): is it a BEIR dataset folder?")


@dataclass(frozen=True)
class BeirData:
    corpus: dict[str, str]  # doc id -> title and text
    queries: dict[str, str]  # query id -> text, judged queries only, in file order
    qrels: dict[str, dict[str, int]]


def load_beir(directory: Path, split: str = "test") -> BeirData:
    corpus: dict[str, str] = {}
    for doc in _open_jsonl(_find(directory, "corpus.jsonl")):
        title = str(doc.get("title") or "").strip()
        text = str(doc.get("text") or "").strip()
        corpus[str(doc["_id"])] = f"{title}\n{text}" if title and text else (title or text)
    qrels_path = directory / "qrels" / f"{split}.tsv"
    if not qrels_path.exists():
        raise InvalidInput(f"{qrels_path} does not exist: pick another --split")
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path, encoding="utf-8", newline="") as handle:
        for row in csv.reader(handle, delimiter="\t"):
            if not row or row[0] == "query-id":
                continue
            qid, did, score = row[0], row[1], int(row[2])
            if score > 0:
                qrels.setdefault(qid, {})[did] = score
    queries = {
        str(q["_id"]): str(q["text"])
        for q in _open_jsonl(_find(directory, "queries.jsonl"))
        if str(q["_id"]) in qrels
    }
    missing = set(qrels) - set(queries)
    if missing:
        raise InvalidInput(f"{len(missing)} judged queries are not in queries.jsonl")
    return BeirData(corpus=corpus, queries=queries, qrels=qrels)


@dataclass(frozen=True)
class Turn:
    namespace: str
    id: str
    content: str
    created_at: datetime
    session: str = ""  # the conversation's session it belongs to (session_1, ...)


@dataclass(frozen=True)
class Question:
    namespace: str
    id: str
    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class LocomoData:
    turns: list[Turn]
    questions: list[Question]
    dropped_evidence: int  # evidence ids that name no turn
    unanswerable: int  # questions left with no evidence


def parse_session_time(text: str) -> datetime:
    """LoCoMo's ``1:56 pm on 8 May, 2023``."""
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError:
        raise InvalidInput(f"unrecognized LoCoMo session time {text!r}") from None


_DIALOGUE_ID = re.compile(r"D\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)


def dialogue_id(text: str) -> str:
    """A turn's id as ``D<session>:<turn>`` without leading zeros (``D30:05`` is ``D30:5``)."""
    found = _DIALOGUE_ID.fullmatch(text.strip())
    return f"D{int(found[1])}:{int(found[2])}" if found else text.strip()


def evidence_ids(text: str) -> list[str]:
    """Every turn id an evidence entry names, in any of the forms the data uses: one
    id, ids separated by semicolons, commas or spaces, zero-padded turn numbers."""
    return [f"D{int(session)}:{int(turn)}" for session, turn in _DIALOGUE_ID.findall(text)]


def load_locomo(path: Path, categories: tuple[int, ...] = (1, 2, 3, 4)) -> LocomoData:
    try:
        samples = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path} is not valid JSON ({exc.msg})") from None
    turns: list[Turn] = []
    questions: list[Question] = []
    dropped = unanswerable = 0
    for sample in samples:
        ns = str(sample["sample_id"])
        conv = sample["conversation"]
        known: set[str] = set()
        n = 1
        while f"session_{n}" in conv:
            start = parse_session_time(conv[f"session_{n}_date_time"])
            for index, turn in enumerate(conv[f"session_{n}"]):
                content = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    content += f" [shares an image: {turn['blip_caption']}]"
                dia = dialogue_id(str(turn["dia_id"]))
                known.add(dia)
                turns.append(
                    Turn(
                        ns,
                        f"{ns}:{dia}",
                        content,
                        start + timedelta(seconds=30 * index),
                        f"session_{n}",
                    )
                )
            n += 1
        for number, qa in enumerate(sample["qa"]):
            if qa.get("category") not in categories:
                continue
            evidence = []
            for item in qa.get("evidence", []):
                for dia in evidence_ids(str(item)):
                    if dia in known:
                        evidence.append(f"{ns}:{dia}")
                    else:
                        dropped += 1
            if not evidence:
                unanswerable += 1
                continue
            ident, text, category = f"{ns}:q{number}", str(qa["question"]), int(qa["category"])
            questions.append(Question(ns, ident, text, category, tuple(dict.fromkeys(evidence))))
    return LocomoData(turns, questions, dropped, unanswerable)
