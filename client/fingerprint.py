"""What makes two candidate sources "the same attempt": their token stream, not their bytes.

Comments, blank lines and changes of indentation width or spacing do not change what a kernel does,
so a resubmission that differs only in those is recognised and answered from the log instead of
being profiled again. Sources that do not tokenize (a syntax error) fall back to their stripped text.
"""

from __future__ import annotations

import hashlib
import io
import tokenize
from typing import Any

_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}


def fingerprint(source: str) -> str:
    """A short hash of the source's significant tokens (sha256 prefix, 24 hex digits)."""
    try:
        parts = []
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in _SKIP:
                continue
            if tok.type == tokenize.INDENT:
                parts.append("<in>")
            elif tok.type == tokenize.DEDENT:
                parts.append("<de>")
            elif tok.type == tokenize.NEWLINE:
                parts.append("<nl>")
            else:
                parts.append(tok.string)
        text = "\x00".join(parts)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        text = "\n".join(line.rstrip() for line in source.strip().splitlines())
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


# A profile of a source already profiled (same problem, shape and options) is answered from the log:
# a new profile would only repeat the verdict. compile is cheap and cached by the server, and a
# compile asking for the assembly wants text the log does not keep, so it always goes through.
PROFILE_OPTIONS: tuple[str, ...] = ("graph", "baseline", "l2")
# An option's default, which keys as if it were not given (so keys logged before the option existed still match).
OPTION_DEFAULTS: dict[str, Any] = {"l2": "cold"}


def attempt_key(tool: str, args: dict[str, Any], fp: str | None = None) -> str | None:
    """The "already tried?" key of a call, or None for calls that are never answered from the log."""
    if tool != "profile" or not isinstance(args.get("source"), str) or not isinstance(args.get("problem"), str):
        return None
    fp = fp or fingerprint(args["source"])
    options = ",".join(f"{k}={args.get(k)!r}" for k in PROFILE_OPTIONS
                       if args.get(k) is not None and args.get(k) != OPTION_DEFAULTS.get(k))
    return f"{args['problem']}|{args.get('shape') or 'bench'}|{fp}|{options}"
