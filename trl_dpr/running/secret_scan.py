"""Finding secrets in files before they leave the machine: the values of this shell's credentials, scanned in chunks.

Findings name the secret and the file, never the value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Environment variables that hold credentials a run may see; any other `*_TOKEN`, `*_API_KEY`, `*_SECRET`,
# `*_PASSWORD`, `*_ACCESS_KEY` variable is treated as one too.
SECRET_ENV_VARS = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "WANDB_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "TRACKIO_WRITE_TOKEN",
)
_SECRET_NAME = re.compile(r"(^|_)(TOKEN|API_KEY|SECRET|SECRET_KEY|PASSWORD|ACCESS_KEY)$")
MIN_SECRET_LENGTH = 8  # shorter values ("1", "true") would match everywhere


@dataclass(frozen=True)
class SecretFinding:
    """A file that contains the value of a secret. Only the secret's *name* is kept, never its value."""

    path: str
    secret_name: str

    def __str__(self) -> str:
        return f"{self.path} contains the value of {self.secret_name}"


def secrets_from_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Credentials visible to this process, by name: `SECRET_ENV_VARS`, any other variable named like a credential
    (`*_TOKEN`, `*_API_KEY`, `*_SECRET`, `*_PASSWORD`, `*_ACCESS_KEY`), and the Hugging Face token saved by
    `hf auth login`. Values shorter than 8 characters are left out (they would match everywhere).
    """
    use_os = environ is None
    environ = os.environ if environ is None else environ
    found = {
        name: value
        for name, value in environ.items()
        if (name in SECRET_ENV_VARS or _SECRET_NAME.search(name)) and len(value.strip()) >= MIN_SECRET_LENGTH
    }
    if use_os:
        from huggingface_hub import constants

        token_file = Path(constants.HF_TOKEN_PATH)
        stored = token_file.read_text().strip() if token_file.is_file() else ""
        if len(stored) >= MIN_SECRET_LENGTH and stored not in found.values():
            found[f"the Hugging Face token in {token_file}"] = stored
    return found


def _files_under(paths: Iterable[str | os.PathLike]) -> list[Path]:
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"Cannot scan {str(path)!r}: no such file or directory.")
    return files


def scan_for_secrets(
    paths: Iterable[str | os.PathLike], secrets: Mapping[str, str] | Iterable[str], chunk_size: int = 1 << 20
) -> list[SecretFinding]:
    """Every (file, secret) pair where a file under `paths` (recursively, hidden files included) contains a secret's
    value; `secrets` is `{name: value}` or bare values. Findings name the secret, never show its value.
    """
    named = dict(secrets) if isinstance(secrets, Mapping) else {f"secret #{i}": v for i, v in enumerate(secrets)}
    needles = {}
    for name, value in named.items():
        if not value:
            continue
        if len(value) < MIN_SECRET_LENGTH:
            raise ValueError(
                f"The value of {name} is {len(value)} characters long; values shorter than {MIN_SECRET_LENGTH} would "
                "match ordinary text. Pass the full secret."
            )
        needles[name] = value.encode("utf-8")
    if not needles:
        return []
    overlap = max(len(n) for n in needles.values()) - 1
    findings = []
    for file in _files_under(paths):
        remaining = dict(needles)
        tail = b""
        with open(file, "rb") as handle:
            while remaining and (chunk := handle.read(chunk_size)):
                window = tail + chunk
                for name in [n for n, needle in remaining.items() if needle in window]:
                    findings.append(SecretFinding(str(file), name))
                    del remaining[name]
                tail = window[-overlap:] if overlap else b""
    return findings
