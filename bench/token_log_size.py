"""What per-token logging costs in decision-log bytes: each log's records as written (the default
``Policy.token_log``, every candidate's first 64 tokens), and the same records without their
``extra.token_samples`` (``TokenLog(keep="off")``) or with only the accepted candidate's
(``keep="accepted"``), encoded by the writer's own line encoder.

    retryctl demo --log demo.jsonl
    .venv/bin/python bench/token_log_size.py demo.jsonl [more logs...]

Printed per log: records, verdicts carrying per-token data, candidates logged, tokens logged, and
bytes per record under each setting. The records are re-chained as they are re-encoded, so each
figure is what that setting would have written for the same run.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from retryctl.audit._canonical import GENESIS_HASH, encode_line


def _without(record: dict[str, Any], keep: str) -> dict[str, Any]:
    extra = record.get("extra")
    if not isinstance(extra, dict) or "token_samples" not in extra:
        return record
    items = [i for i in extra["token_samples"] if keep == "all" or (keep == "accepted" and i.get("accepted"))]
    rest = {k: v for k, v in extra.items() if k != "token_samples"}
    return {**record, "extra": rest | ({"token_samples": items} if items else {})}


def _size(records: list[dict[str, Any]], keep: str) -> int:
    prev, total = GENESIS_HASH, 0
    for record in records:
        body = {k: v for k, v in _without(record, keep).items() if k != "hash"} | {"prev_hash": prev}
        line, prev = encode_line(body)
        total += len(line)
    return total


def measure(path: str) -> dict[str, Any]:
    """The figures of one log."""
    with open(path, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    samples = [
        item
        for r in records
        for item in (r.get("extra") or {}).get("token_samples", [])
        if isinstance(item, dict)
    ]
    n = max(1, len(records))
    sizes = {keep: _size(records, keep) for keep in ("all", "accepted", "off")}
    return {
        "log": path,
        "records": len(records),
        "verdicts_with_tokens": sum(1 for r in records if "token_samples" in (r.get("extra") or {})),
        "candidates_logged": len(samples),
        "tokens_logged": sum(len(s.get("token_logprobs", [])) for s in samples),
        **{f"bytes_per_record_{keep}": round(size / n) for keep, size in sizes.items()},
        "bytes_per_token": round(
            (sizes["all"] - sizes["off"]) / max(1, sum(len(s.get("token_logprobs", [])) for s in samples)), 1
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", help="decision logs written with the default token_log")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON lines")
    args = parser.parse_args()
    for path in args.logs:
        f = measure(path)
        if args.json:
            print(json.dumps(f))
            continue
        print(
            f"{f['log']}: {f['records']} records, {f['verdicts_with_tokens']} verdicts with per-token data, "
            f"{f['candidates_logged']} candidates, {f['tokens_logged']} tokens; bytes per record: "
            f"all {f['bytes_per_record_all']}, accepted {f['bytes_per_record_accepted']}, "
            f"off {f['bytes_per_record_off']} ({f['bytes_per_token']} bytes per logged token)"
        )


if __name__ == "__main__":
    main()
