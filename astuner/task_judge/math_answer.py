"""Math answer extraction and comparison (GSM8K-style ground truths, LaTeX boxed answers)."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Optional

_NUMBER = re.compile(r"^[-+]?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?$")
_FRAC = re.compile(r"^([-+]?)\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}$")
_LEADING_NUMBER_WITH_UNIT = re.compile(r"^([-+]?[\d,]*\.?\d+)\s*([A-Za-z][A-Za-z .]*)?$")


def last_boxed(text: str) -> Optional[str]:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`) in `text`, nested braces allowed."""
    if not isinstance(text, str):
        return None
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    while start != -1:
        brace = text.find("{", start)
        if brace == -1:
            return None
        depth = 0
        for i in range(brace, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[brace + 1:i].strip()
        start = max(text.rfind("\\boxed", 0, start), text.rfind("\\fbox", 0, start))
    return None


ANSWER_FIELDS = ("ground_truth", "answer", "final_answer", "label")  # a row's reference answer, first found


def expected_answer(metadata: dict[str, Any]) -> Any:
    """A task row's reference answer as the row holds it (None when it has none of ANSWER_FIELDS)."""
    return next((metadata[key] for key in ANSWER_FIELDS if metadata.get(key) is not None), None)


def ground_truth_of(metadata: dict[str, Any]) -> Optional[str]:
    """The reference answer of a task row: `ground_truth`, or `answer` (GSM8K's '... #### 72' keeps 72)."""
    value = expected_answer(metadata)
    if value is not None:
        text = str(value)
        if "####" in text:
            text = text.rsplit("####", 1)[1]
        return text.strip()
    return None


_ASSIGNMENT = re.compile(r"^[A-Za-z]\w*\s*=\s*(?=\S)")  # "x = 18": the value is the answer
_SPLIT_DIGITS = re.compile(r"\d\s+\d")  # "1 8" is not how 18 is written
_SPACED_THOUSANDS = re.compile(r"^[-+]?\d{1,3}([ \u2009\u202f]\d{3})+(\.\d+)?$")


def _strip_latex(s: str) -> str:
    s = s.strip().strip(".").strip()
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\mathrm\{([^{}]*)\}", r"\1", s)
    s = s.replace("{,}", ",")
    for token in ("\\$", "$", "\\!", "\\,", "\\;", "\\left", "\\right", "\\%", "%"):
        s = s.replace(token, "")
    return _ASSIGNMENT.sub("", s.strip()).strip()


def to_number(s: str) -> Optional[Fraction]:
    """Exact value of '18', '18.0', '$18', '18 dollars', '1,000', '\\frac{1}{2}', '3/4'; None otherwise."""
    s = _strip_latex(s)
    s = s.replace("\u2212", "-")
    if _SPACED_THOUSANDS.match(s):  # "1 000" (a space, thin or narrow no-break space, between groups of three)
        s = re.sub(r"[ \u2009\u202f]", "", s)
    m = _FRAC.match(s.replace(" ", ""))
    if m:
        num, den = to_number(m.group(2)), to_number(m.group(3))
        if num is None or den in (None, 0):
            return None
        value = num / den
        return -value if m.group(1) == "-" else value
    if re.fullmatch(r"[-+]?\d+\s*/\s*\d+", s):
        num, den = (int(x) for x in s.replace(" ", "").lstrip("+").split("/"))
        return Fraction(num, den) if den else None
    m = _LEADING_NUMBER_WITH_UNIT.match(s)
    if not m:
        return None
    number = m.group(1).replace(",", "")
    if "," in m.group(1) and not _NUMBER.match(m.group(1)):
        return None
    try:
        return Fraction(number)
    except (ValueError, ZeroDivisionError):
        return None


def normalize_text(s: str) -> str:
    return re.sub(r"\s+", "", _strip_latex(s)).lower()


def answers_match(predicted: str, reference: str) -> bool:
    """Numeric equality when both sides are numbers, else equality of normalised strings."""
    p_num, r_num = to_number(predicted), to_number(reference)
    if p_num is not None and r_num is not None:
        return p_num == r_num
    if _SPLIT_DIGITS.search(_strip_latex(predicted)) and not _SPLIT_DIGITS.search(_strip_latex(reference)):
        return False  # digits the spaces would glue together ("1 8" vs 18)
    return normalize_text(predicted) == normalize_text(reference) != ""


def extract_answer(text: Any) -> Optional[str]:
    """The answer a model gave: the last \\boxed{...}; else a bare number; else what follows '####'."""
    if text is None:
        return None
    text = str(text)
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    if to_number(text) is not None:
        return text.strip()
    if "####" in text:
        return text.rsplit("####", 1)[1].strip()
    return None
