"""`JsonlCache`: append-only JSONL records keyed by some of their fields, so an interrupted run resumes where it stopped.

Each record is flushed as soon as it exists. A last line cut by a crash is dropped; a corrupt line elsewhere, or
records made with other settings, stop the run with an error that says which file to delete. Settings named in
`renewed_by` (the weights that made answers) change under the user, not by their choice: records that differ only there
are stale, made again, and replace the file; records written before such a setting existed (no key) take its current
value, and the file is rewritten with it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)


class JsonlCache:
    """Records of one JSONL file by `key_fields`; `settings` (what made them) are written into each and must match,
    except that records differing only in `renewed_by` settings are dropped (a warning) and the file is rewritten from
    the first new record on (until then it is left as it was), and records without them (an earlier trl_dpr) take the
    current values; one that is None here is unknown, not a change. A setting absent from a record and None here is the
    same setting."""

    def __init__(
        self, path: str | Path, key_fields: Sequence[str], settings: dict | None = None, renewed_by: Sequence[str] = ()
    ):
        self.path = Path(path)
        self.key_fields = tuple(key_fields)
        self.settings = settings
        self.renewed_by = tuple(renewed_by)
        self._stale = False  # the file holds only stale records: the first write replaces it
        self._records: dict[tuple, dict] = {}
        self._load()

    def key_of(self, record: dict) -> tuple:
        try:
            return tuple(record[field] for field in self.key_fields)
        except KeyError as error:
            raise ValueError(f"Record {record!r:.200} lacks the key field {error.args[0]!r} of {self.path}.") from None

    def __contains__(self, key: tuple) -> bool:
        return tuple(key) in self._records

    def __len__(self) -> int:
        return len(self._records)

    def get(self, key: tuple) -> dict | None:
        return self._records.get(tuple(key))

    def records(self) -> list[dict]:
        return list(self._records.values())

    def add(self, record: dict) -> None:
        self.add_many([record])

    def add_many(self, records: Iterable[dict]) -> None:
        """Append records (with this cache's settings) and flush them to disk at once."""
        records = [{**r, "settings": self.settings} if self.settings is not None else dict(r) for r in records]
        if not records:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "w" if self._stale else "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
            f.flush()
        self._stale = False
        for record in records:
            self._records[self.key_of(record)] = record

    def _load(self) -> None:
        if not self.path.is_file():
            return
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        offset, adopted, truncated = 0, False, False
        for number, line in enumerate(lines, start=1):
            start, offset = offset, offset + len(line) + 1
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines):  # the last line, cut by an interrupted write: drop it and carry on
                    logger.warning(f"{self.path}: dropping an incomplete last line (an interrupted write).")
                    with open(self.path, "r+b") as f:
                        f.truncate(start)
                    truncated = True
                    break
                raise ValueError(
                    f"{self.path}:{number} is not valid JSON and is not the last line, so the cache is corrupt. "
                    "Delete that line (or the file, to recompute everything in it)."
                ) from None
            verdict = self._check_settings(record, number)
            if verdict == "stale":
                self._records.clear()
                self._stale = True
                return
            if verdict == "adopted":
                record, adopted = {**record, "settings": self.settings}, True
            self._records[self.key_of(record)] = record
        if adopted:  # pin the current values, so that a later change of them is seen (one atomic rewrite)
            logger.info(
                f"{self.path}: records of an earlier trl_dpr (no {', '.join(self.renewed_by)}) take the current."
            )
            partial = self.path.with_name(self.path.name + ".partial")
            partial.write_text(
                "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in self._records.values()), encoding="utf-8"
            )
            os.replace(partial, self.path)
        elif raw and not raw.endswith(b"\n") and not truncated:  # a whole last record without its newline: complete it
            with open(self.path, "ab") as f:
                f.write(b"\n")

    def _check_settings(self, record: dict, number: int) -> str:
        """ "same" when `record` was made with these settings (a key absent there and None here is the same);
        "adopted" when it only lacks `renewed_by` keys (written before they existed: they take their current value);
        "stale" when it differs only in `renewed_by` values; otherwise an error. A `renewed_by` value that is None now
        (unknown: a model folder moved away) is not a change."""
        if self.settings is None or record.get("settings") == self.settings:
            return "same"
        found = record.get("settings") or {}
        unknown = [k for k in self.renewed_by if self.settings.get(k) is None]  # cannot be told now: not a change
        missing = [k for k in self.renewed_by if k not in found and k not in unknown]
        differing = sorted(
            k
            for k in set(found) | set(self.settings)
            if found.get(k) != self.settings.get(k) and k not in missing and k not in unknown
        )
        if not differing:
            return "adopted" if missing else "same"
        details = "; ".join(f"{k}: {found.get(k)!r} in the file, {self.settings.get(k)!r} now" for k in differing)
        if set(differing) <= set(self.renewed_by):
            logger.warning(
                f"{self.path} was made with other {' and '.join(differing)} ({details}): its weight files were "
                "rewritten since (retrained, replaced or copied) or its Hub commit changed, so its records are made "
                "again and replace the file."
            )
            return "stale"
        raise ValueError(
            f"{self.path}:{number} was made with other settings ({details}). Cached results are only reused for "
            "identical settings: delete the file to recompute it, or use another output_dir."
        )


def text_digest(*texts: str) -> str:
    """A short, stable fingerprint of some texts (to key cached verdicts by the exact answers judged)."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(hashlib.sha256(text.encode("utf-8")).digest())
    return digest.hexdigest()[:16]
