"""Finding secrets in files before they leave the machine: the values of this shell's credentials, scanned in chunks.

Findings name the secret and the file, never the value.
"""

from __future__ import annotations

import codecs
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


# ---- what a push refuses: keys by their shape, in plain, compressed or base64 form ----------------------------------

# What each looks like; found anywhere in a pushed file, whatever this shell's environment holds. A literal prefix
# keeps the search at memory speed on weights; the character before a match is checked in `_key_shape_hits`.
KEY_SHAPES = {
    "a Hugging Face token (hf_...)": re.compile(rb"hf_[A-Za-z0-9]{30,}"),
    "an API key (sk-...)": re.compile(rb"sk-[A-Za-z0-9_-]{20,}"),
}
WANDB_KEY = "a W&B API key (40 hex digits beside 'wandb')"
_HEX40 = re.compile(rb"(?<![0-9a-fA-F])[0-9a-f]{40}(?![0-9a-fA-F])")
_BASE64_RUN = re.compile(rb"[A-Za-z0-9+/_-]{16,}={0,2}")
_COMPRESSED = (".gz", ".bz2", ".xz", ".lzma", ".zip")
# Weights and other binary formats: scanned as raw bytes in chunks, not decoded (a model has no base64 to hide a key in)
_BINARY = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".npy", ".npz", ".ckpt", ".h5", ".msgpack", ".onnx")
_READ_WHOLE_MAX = 64 << 20  # text files up to this size (and decompressed logs) are read whole, base64 runs decoded


def _key_shape_hits(data: bytes) -> list[tuple[int, bytes, str]]:
    """(offset, match, what) of the first key of each shape in `data`: `KEY_SHAPES`, and 40 hex digits on a line
    that says "wandb" within 100 bytes (W&B keys have no prefix; a git commit hash alone is not one)."""
    hits = []
    for what, pattern in KEY_SHAPES.items():
        for match in pattern.finditer(data):
            before = data[match.start() - 1 : match.start()]
            if before.isalnum() or before in (b"_", b"-"):
                continue  # inside a longer word
            if what.startswith("an API key") and not any(48 <= c <= 57 for c in match.group()):
                continue  # "sk-" begins ordinary hyphenated words too ("risk-assessment-..."); a key has digits
            hits.append((match.start(), match.group(), what))
            break
    lowered, start = data.lower(), 0
    while (at := lowered.find(b"wandb", start)) >= 0:
        left, right = max(0, at - 100), at + 105
        left = max(left, data.rfind(b"\n", left, at) + 1)
        newline = data.find(b"\n", at, right)
        match = _HEX40.search(data, left, newline if newline >= 0 else right)
        if match:
            hits.append((match.start(), match.group(), WANDB_KEY))
            break
        start = at + 5
    return hits


def _hits(data: bytes, needles: Mapping[str, bytes], shapes: bool) -> list[tuple[int, str]]:
    """(offset, what) of the first occurrence in `data` of each needle's value and, with `shapes`, of each key shape."""
    hits = [(data.find(value), f"the value of {name}") for name, value in needles.items() if value in data]
    if shapes:  # a key that is a variable's value is named by the variable
        hits += [(at, what) for at, key, what in _key_shape_hits(data) if not any(v in key for v in needles.values())]
    return hits


def _decoded_base64_hits(data: bytes, needles: Mapping[str, bytes], shapes: bool) -> list[tuple[int, str]]:
    """Hits inside base64 runs of `data` (standard or URL-safe alphabet), at the offset where the run starts."""
    import base64
    import binascii

    hits, seen = [], set()
    for run in _BASE64_RUN.finditer(data):
        text = run.group().rstrip(b"=")
        text = text[: len(text) - 1] if len(text) % 4 == 1 else text
        altchars = b"-_" if (b"-" in text or b"_" in text) else None
        if altchars and (b"+" in text or b"/" in text):
            continue  # both alphabets at once: not base64
        try:
            decoded = base64.b64decode(text + b"=" * (-len(text) % 4), altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            continue
        for _, what in _hits(decoded, needles, shapes):
            if what not in seen:
                seen.add(what)
                hits.append((run.start(), f"{what}, base64-encoded"))
    return hits


def _decompressed(path: Path) -> list[tuple[str | None, bytes]]:
    """The content of a compressed file, at most `_READ_WHOLE_MAX` bytes in all: (None, content), or a zip's
    (member, content) for each member. Members are kept apart: each is a file of its own, in its own encoding (two
    UTF-16 logs joined are not UTF-16 text after the first one's end)."""
    import bz2
    import gzip
    import lzma
    import zipfile

    if path.suffix == ".zip":
        parts, budget = [], _READ_WHOLE_MAX
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if budget <= 0:
                    break
                with archive.open(member) as handle:
                    parts.append((member, handle.read(budget)))
                budget -= len(parts[-1][1])
        return parts
    opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open, ".lzma": lzma.open}[path.suffix]
    with opener(path, "rb") as handle:
        return [(None, handle.read(_READ_WHOLE_MAX))]


def _wide_encoding(data: bytes) -> str | None:
    """The encoding of `data` when it is UTF-16 or UTF-32 text (by its BOM, or without one when the bytes of each
    ASCII character's zeros line up: every other byte, or three of four), where a key's bytes are not contiguous."""
    boms = (
        (b"\xff\xfe\x00\x00", "utf-32"),
        (b"\x00\x00\xfe\xff", "utf-32"),
        (b"\xff\xfe", "utf-16"),
        (b"\xfe\xff", "utf-16"),
    )
    encoding = next((name for bom, name in boms if data.startswith(bom)), None)
    if encoding is None and len(data) >= 8:

        def zeros(*offsets: int, step: int) -> bool:  # nearly all ASCII: a stray non-Latin character may break a few
            return all(data[i::step].count(0) >= 0.9 * len(data[i::step]) for i in offsets)

        for offsets, step, name in (
            ((1, 2, 3), 4, "utf-32-le"),
            ((0, 1, 2), 4, "utf-32-be"),
            ((1,), 2, "utf-16-le"),
            ((0,), 2, "utf-16-be"),
        ):
            if len(data) % step == 0 and zeros(*offsets, step=step):
                encoding = name
                break
    return encoding


def _as_utf8(data: bytes) -> bytes | None:
    """`data` re-encoded as UTF-8 when it is UTF-16 or UTF-32 text (`_wide_encoding`); else None."""
    return None if (encoding := _wide_encoding(data)) is None else data.decode(encoding, errors="replace").encode()


def secrets_in_file(
    path: str | os.PathLike, secrets: Mapping[str, str], *, shapes: bool = True, chunk_size: int = 1 << 20
) -> list[tuple[int, str]]:
    """(line, what) for each secret `path` holds: a value of `secrets`, and with `shapes` a `KEY_SHAPES` key, in its
    bytes, decompressed when it is compressed, and in its base64 runs when it is text (UTF-8, or UTF-16/32 decoded;
    weights are scanned raw)."""
    path = Path(path)
    needles = {name: value.encode() for name, value in secrets.items() if value}

    def lined(data: bytes, hits) -> list[tuple[int, str]]:
        return sorted((data.count(b"\n", 0, offset) + 1, what) for offset, what in hits)

    def text_hits(data: bytes) -> list[tuple[int, str]]:  # UTF-16/32 text is scanned as the characters it holds too
        found = lined(data, _hits(data, needles, shapes) + _decoded_base64_hits(data, needles, shapes))
        if (text := _as_utf8(data)) is None:
            return found
        return sorted(
            {*found, *lined(text, _hits(text, needles, shapes) + _decoded_base64_hits(text, needles, shapes))}
        )

    if path.suffix in _COMPRESSED:
        try:
            members = _decompressed(path)
        except Exception as error:  # a truncated archive, or one that only looks compressed
            return [(0, f"content that could not be decompressed to check it ({type(error).__name__})")]
        return [
            (line, f"{what} (decompressed)" + (f" in its member {member}" if member is not None else ""))
            for member, data in members
            for line, what in text_hits(data)
        ]
    if path.suffix not in _BINARY and path.stat().st_size <= _READ_WHOLE_MAX:
        return text_hits(path.read_bytes())
    found: dict[str, int] = {}
    overlap = max([256, *(len(v) for v in needles.values())])
    with open(path, "rb") as handle:
        # A text file too big to read whole is scanned as its bytes and, when its first chunk is UTF-16/32 text, as
        # the characters it holds too: decoded chunk by chunk (a character split between two chunks is kept whole).
        first = handle.read(chunk_size)
        encoding = None if path.suffix in _BINARY else _wide_encoding(first)
        decoder = codecs.getincrementaldecoder(encoding)(errors="replace") if encoding else None
        streams = {"raw": [b"", 0]} | ({"text": [b"", 0]} if decoder else {})  # each: [the tail, lines before it]
        chunk = first
        while chunk:
            for stream, state in streams.items():
                tail, lines_before = state
                window = tail + (chunk if stream == "raw" else decoder.decode(chunk).encode())
                for offset, what in _hits(window, needles, shapes):
                    found.setdefault(what, lines_before + window.count(b"\n", 0, offset) + 1)
                state[0] = window[-overlap:]
                state[1] = lines_before + window.count(b"\n", 0, len(window) - len(state[0]))
            chunk = handle.read(chunk_size)
    return sorted((line, what) for what, line in found.items())


# ---- recipes: no key pasted in a file others read and copy ----------------------------------------------------------

_KEY_FIELD = re.compile(r"^(hub_token|token|api_key)$|_(api_key|secret|password)$", re.IGNORECASE)


def refuse_pasted_secrets(recipe_path: str | os.PathLike) -> None:
    """A `ValueError` (one line) when a recipe YAML holds a key: a value shaped like one (`KEY_SHAPES`, 40 hex digits
    under a W&B key), or any value of a credential field (`hub_token`, `token`, `*_api_key`, ...), at any depth."""
    from .recipe_checks import load_recipe_yaml

    with open(recipe_path) as handle:
        recipe = load_recipe_yaml(handle)

    def walk(value, where: str):
        if isinstance(value, dict):
            for key, inner in value.items():
                yield from walk(inner, f"{where}.{key}" if where else str(key))
        elif isinstance(value, list):
            for i, inner in enumerate(value):
                yield from walk(inner, f"{where}[{i}]")
        elif isinstance(value, str) and value.strip():
            yield where, value

    for where, value in walk(recipe, ""):
        field = where.rsplit(".", 1)[-1].split("[")[0]
        found = [what for what, pattern in KEY_SHAPES.items() if pattern.search(value.encode())]
        if "wandb" in where.lower() and _HEX40.search(value.encode()):
            found.append(WANDB_KEY)
        if found or _KEY_FIELD.search(field):
            what = found[0] if found else "a credential field"
            raise ValueError(
                f"{recipe_path}: `{where}` holds what looks like a key ({what}). Keys never go in a recipe, which others "
                "read and copy: remove it and export the key in your shell (HF_TOKEN or `hf auth login`, "
                "WANDB_API_KEY, the judge's OPENAI_API_KEY)."
            )
