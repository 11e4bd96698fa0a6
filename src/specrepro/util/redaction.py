"""Secrets stay out of every log, param, tag and artifact specrepro writes."""

from __future__ import annotations

import os
import re
from typing import Iterable, List, Optional

SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|CREDENTIAL)", re.I)


def secret_values() -> List[str]:
    """Values of secret-looking environment variables: never written anywhere."""
    return [v for k, v in os.environ.items() if SECRET_NAME.search(k) and len(v) >= 4]


def redact(text: str, secrets: Optional[Iterable[str]] = None) -> str:
    for value in secrets if secrets is not None else secret_values():
        text = text.replace(value, "***")
    return text


def mask_bytes(line: bytes, secrets: Iterable[str]) -> bytes:
    """`redact` for raw bytes (a server's output on its way to the log)."""
    for value in secrets:
        line = line.replace(value.encode(), b"***")
    return line
