"""A traffic file: its rows, each row's request, and the spellings of its columns. A request
log or a published LLM serving trace works as it is published: JSON lines or CSV, the columns in
any case and spelling of their words (:func:`column`: Azure's ``ContextTokens``, BurstGPT's
``Request tokens``, Mooncake's ``input_length`` all read as a prompt's length). Bad traffic is
refused in one line that names its line."""

from __future__ import annotations

import csv
import itertools
import json
import re
from pathlib import Path
from typing import Any, TextIO

from autotune.errors import ConfigError

COLUMNS = ("batch_size", "seq_len")
# A log's spellings of a request's prompt length, and of its answer's (a generate traffic's),
# as :func:`column` reads a column's name: Azure's ContextTokens and GeneratedTokens, BurstGPT's
# "Request tokens" and "Response tokens", Mooncake's input_length and output_length
PROMPT = ("seq_len", "prompt_tokens", "prompt_len", "prompt_length", "input_len",
          "input_length", "input_tokens", "context_tokens", "request_tokens")  # fmt: skip
ANSWER = ("new_tokens", "completion_tokens", "output_len", "output_length", "output_tokens",
          "generated_tokens", "response_tokens")  # fmt: skip
# The one rule for an answer's length, wherever it is given (a flag, a file, a stored study)
LEAST_ANSWER = 2
ANSWER_RULE = (f"at least {LEAST_ANSWER}: the prefill gives the first token, decode steps the "
               "rest")  # fmt: skip
# A file's requests, at most, unless --requests takes its first N: the study stores the traffic
# with every measurement. Past it the file is refused, never cut without a word.
MAX_REQUESTS = 100_000


def read_file(path: str, requests: int | None = None) -> tuple[tuple[int, ...], ...]:
    """A traffic file's requests in order, all of them (the first ``requests`` where given),
    each ``(batch_size, seq_len)``, or ``(batch_size, seq_len, new_tokens)`` where the file
    gives answers (:data:`ANSWER`'s spellings; the prompt's are :data:`PROMPT`'s);
    ``ConfigError`` naming the line for an empty file, a malformed line or a bad value, and
    for a file of more than :data:`MAX_REQUESTS` without ``requests``."""
    found = rows(path, requests)
    return tuple(request(f"--traffic {path} line {n}", row) for n, row in found)


def column(name: Any) -> str:
    """A column's name as the spellings above write it: its words in lower case joined by
    ``_`` (``ContextTokens``, ``Request tokens``, ``input-length`` -> ``context_tokens``,
    ``request_tokens``, ``input_length``; ``TIMESTAMP`` -> ``timestamp``)."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(name).strip())
    return re.sub(r"[\s_-]+", "_", words).strip("_").lower()


def rows(path: str, requests: int | None = None) -> list[tuple[int, dict[str, Any]]]:
    """A traffic file's rows as read, each with its line's number (:func:`read_file`'s
    refusals, but no row's values checked); with ``requests``, its first N, the rest unread."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"--traffic {path}: no such file")
    try:
        with file.open(encoding="utf-8-sig", newline="") as handle:
            found, left = _read(path, handle, requests)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--traffic {path}: cannot read it ({exc})") from None
    if not found:
        raise ConfigError(f"--traffic {path}: the file holds no requests")
    if not requests and len(found) > MAX_REQUESTS:
        raise ConfigError(f"--traffic {path}: {len(found) + left:,} requests, more than the "
                          f"{MAX_REQUESTS:,} a study holds; --requests N takes the first "
                          "N")  # fmt: skip
    return found


def _read(path: str, handle: TextIO,
          requests: int | None) -> tuple[list[tuple[int, dict[str, Any]]], int]:  # fmt: skip
    """An open traffic file's first ``requests`` rows (else up to one past
    :data:`MAX_REQUESTS`), and, past that limit, how many more lines hold rows."""
    limit = requests or MAX_REQUESTS + 1
    lines = enumerate(handle, 1)
    blank = []
    for n, line in lines:
        blank.append((n, line))
        if line.strip():
            break
    if not blank or not blank[-1][1].strip():
        return [], 0
    lines = itertools.chain(blank, lines)
    if blank[-1][1].lstrip().startswith("{"):
        json_rows = ((n, _json_line(path, n, line)) for n, line in lines if line.strip())
        found = list(itertools.islice(json_rows, limit))
    else:
        found = _csv_rows(path, (line for _, line in lines), limit)
    more = not requests and len(found) == limit  # counted only to be refused
    return found, sum(1 for _, line in lines if line.strip()) if more else 0


def _json_line(path: str, n: int, line: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise ConfigError(f"--traffic {path} line {n}: not JSON ({exc.args[0]})") from None
    if not isinstance(row, dict):
        raise ConfigError(f"--traffic {path} line {n}: a request is a JSON object with "
                          f"{' and '.join(COLUMNS)}")  # fmt: skip
    return row


def _csv_rows(path: str, lines: Any, limit: int) -> list[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(lines)
    if not set(PROMPT) & {column(h) for h in reader.fieldnames or []}:
        raise ConfigError(f"--traffic {path} line 1: a CSV traffic needs a header with seq_len "
                          f"or {', '.join(PROMPT[1:])} (and batch_size; and for generate "
                          f"{' or '.join(ANSWER)}); JSON lines start with {{")  # fmt: skip
    found = ((reader.line_num, {k.strip(): v for k, v in row.items() if k})
             for row in reader
             if any((v or "").strip() for v in row.values() if isinstance(v, str)))  # fmt: skip
    return list(itertools.islice(found, limit))


def request(where: str, row: dict[str, Any]) -> tuple[int, ...]:
    """One request's ``(batch_size, seq_len[, new_tokens])`` from a row of a log (its columns
    as :func:`column` reads them); ``where`` names the row in an error."""
    found: dict[str, list[str]] = {}
    for name in row:
        found.setdefault(column(name), []).append(name)
    keys = []
    for spellings in (("batch_size",), PROMPT, ANSWER):
        if len(given := [k for s in spellings for k in found.get(s, [])]) > 1:
            raise ConfigError(f"{where}: both {' and '.join(given)}, two spellings of one "
                              "length: give one")  # fmt: skip
        keys.append(given[0] if given else None)
    batch, prompt, answer = keys
    if prompt is None:
        raise ConfigError(f"{where}: no seq_len (or {', '.join(PROMPT[1:])})")
    values = []
    for key, least in ((batch, 1), (prompt, 1), *([(answer, LEAST_ANSWER)] if answer else [])):
        value = row[key] if key else 1
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            rule = f"a whole number of {ANSWER_RULE}{_unplayed(value)}" if key == answer else (
                "a whole number of at least 1")  # fmt: skip
            raise ConfigError(f"{where}: {key} = {value!r}, expected {rule}")
        values.append(value)
    return tuple(values)


def _unplayed(value: Any) -> str:
    """What to do with a trace's answer of 0 or 1 token: keep the rows that can be played."""
    if isinstance(value, bool) or value not in range(LEAST_ANSWER):
        return ""
    return (
        f"; a trace's failed requests (0 tokens: BurstGPT's) and 1-token answers cannot be "
        f"replayed: keep the rows of at least {LEAST_ANSWER} (BurstGPT's "
        "BurstGPT_without_fails files drop its failures)"
    )
