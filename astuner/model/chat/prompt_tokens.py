"""Token ids of rendered prompt text, chunk by chunk, each chunk tokenized once per run.

A fast (Rust `tokenizers`) tokenizer first cuts its input at added tokens (`<|im_start|>`, `<|im_end|>`,
`<tool_call>`, ...); only then is each piece between two of them normalized, pre-tokenized and encoded, on its
own. So a text cut right after such tokens encodes to the ids of its chunks put together, and the chunks of
rendered prompts repeat: the system prompt with its tool list opens every episode of a run, `\\n<|im_start|>` and
`assistant\\n` come in every call. Each chunk is encoded once and then looked up; a call's first prompt costs a
dictionary look-up per chunk instead of tokenizing the whole tool list again.

Texts are cut after the added tokens the chat template writes. The ids stay the same when (`split_tokens`
checks, once per tokenizer): the tokenizer is a fast one that splits its special tokens; a cut token is matched
on the raw text with no stripping or word rule and overlaps no other added token (no match can span a cut); the
pre-tokenizer does not depend on where a piece sits in the text (Metaspace with prepend_scheme "first" does);
BPE has no dropout. Otherwise, and where the first `VERIFY` texts a tokenizer sees are not encoded alike both
ways, every text is encoded whole, as `tokenizer.encode` does.
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from typing import Any, Optional

from loguru import logger

VERIFY = 4  # texts per tokenizer encoded both ways before the chunked ids are trusted alone
MAX_CACHED_CHARS = 4_000_000  # chunk text kept per tokenizer; the older half goes when it would grow past this
MAX_CHUNK_CHARS = 65_536  # longer chunks (a long tool output) are encoded but not kept


def _tail_heads(a: str, b: str) -> bool:
    """Whether some proper suffix of `a` is a prefix of `b`."""
    at = a.find(b[0], 1)
    while at > 0:
        if b.startswith(a[at:]):
            return True
        at = a.find(b[0], at + 1)
    return False


def _overlap(a: str, b: str) -> bool:
    """Whether a match of `a` and one of `b` can share characters in some text."""
    return a in b or b in a or _tail_heads(a, b) or _tail_heads(b, a)


def _position_dependent(pre_tokenizer: Optional[dict]) -> bool:
    if not pre_tokenizer:
        return False
    if pre_tokenizer.get("type") == "Sequence":
        return any(_position_dependent(p) for p in pre_tokenizer.get("pretokenizers", []))
    return pre_tokenizer.get("type") == "Metaspace" and pre_tokenizer.get("prepend_scheme") not in ("always", "never")


def split_tokens(tokenizer: Any) -> list[str]:
    """The added tokens of the chat template a prompt may be cut after with its ids unchanged ([] = none: encode
    whole texts)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(tokenizer, "split_special_tokens", False):
        return []
    spec = json.loads(backend.to_str())
    if (spec.get("model") or {}).get("dropout") or _position_dependent(spec.get("pre_tokenizer")):
        return []
    template = str(getattr(tokenizer, "chat_template", None) or "")
    added = [t for t in spec.get("added_tokens", []) if t.get("content")]
    plain = [t["content"] for t in added if t["content"] in template
             and not (t.get("lstrip") or t.get("rstrip") or t.get("single_word") or t.get("normalized"))]
    others = [t["content"] for t in added]
    return [t for t in plain if not any(o != t and _overlap(t, o) for o in others)]


class PromptTokenizer:
    """`encode(text)`: what `tokenizer.encode(text, add_special_tokens=False)` gives, from cached chunks."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        tokens = sorted(split_tokens(tokenizer), key=len, reverse=True)  # longest first: leftmost-longest matches
        self.cut = re.compile("|".join(map(re.escape, tokens))) if tokens else None
        self.chunks: dict[str, list[int]] = {}
        self.cached_chars = 0
        self.to_verify = VERIFY
        self.lock = threading.Lock()  # workflows may run in threads of their own (rollout.run_workflow_in_thread)

    def whole(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def encode(self, text: str) -> list[int]:
        cut = self.cut  # once: another thread may switch chunking off meanwhile
        if cut is None:
            return self.whole(text)
        ids = self._chunked(text, cut)
        if self.to_verify > 0:
            whole = self.whole(text)
            with self.lock:
                self.to_verify -= 1
                if ids != whole:
                    self.cut = None
                    logger.warning(f"{type(self.tokenizer).__name__}: prompt text cut at added tokens encodes "
                                   f"differently from the whole text; prompts are tokenized whole from now on")
            return whole
        return ids

    def _chunked(self, text: str, cut: re.Pattern) -> list[int]:
        ids: list[int] = []
        start = 0
        for match in cut.finditer(text):
            ids += self._chunk(text[start:match.end()])
            start = match.end()
        if start < len(text):
            ids += self._chunk(text[start:])
        return ids

    def _chunk(self, chunk: str) -> list[int]:
        found = self.chunks.get(chunk)
        if found is not None:
            return found
        found = self.whole(chunk)
        if len(chunk) <= MAX_CHUNK_CHARS:
            with self.lock:
                if self.cached_chars + len(chunk) > MAX_CACHED_CHARS:
                    keys = list(self.chunks)
                    for key in keys[: len(keys) // 2 + 1]:
                        del self.chunks[key]
                    self.cached_chars = sum(map(len, self.chunks))
                if chunk not in self.chunks:
                    self.chunks[chunk] = found
                    self.cached_chars += len(chunk)
        return found


_BY_TOKENIZER: "weakref.WeakKeyDictionary[Any, PromptTokenizer]" = weakref.WeakKeyDictionary()
_BY_TOKENIZER_LOCK = threading.Lock()


def prompt_tokenizer(tokenizer: Any) -> PromptTokenizer:
    """The shared `PromptTokenizer` of `tokenizer` (one per tokenizer object, so its cache spans a run)."""
    found = _BY_TOKENIZER.get(tokenizer)
    if found is None:
        with _BY_TOKENIZER_LOCK:
            found = _BY_TOKENIZER.get(tokenizer)
            if found is None:
                found = _BY_TOKENIZER[tokenizer] = PromptTokenizer(tokenizer)
    return found
