"""Our hand-written math answer judge vs Hugging Face `math-verify`, on rule-labelled model-style answers.

    python bench/math_judge_agreement.py [--n 300] [--seed 0]

Needs `math-verify` in the venv (`pip install 'math-verify[antlr4_9_3]'`: the ANTLR 4.9.3 runtime is the one
hydra-core/omegaconf pin, so it must not be upgraded). Reads the GSM8K test split from $ASTUNER_GSM8K_DIR
(default ../shared/data/gsm8k beside the repo).

What it measures: for N seeded GSM8K test ground truths (the number after '####') it writes answers the way
models write them, each variant made by a RULE and labelled correct/incorrect by construction, then scores
every answer with

* ours: `MathAnswerAsJudge.compute_reward` exactly as training calls it (last \\boxed{} or a bare-number
  reply, then `answers_match` against `ground_truth_of(row)`);
* math-verify: `verify(parse(gold), parse(answer))` with math-verify's default extraction config
  (LatexExtractionConfig() + ExprExtractionConfig(), fallback_mode="first_match", extraction_mode="any_match",
  default signal-based 5 s timeouts; this script runs them in the main thread);
* mv-boxed: the open-r1 reward config (LatexExtractionConfig with boxed_match_priority=0,
  try_extract_without_anchor=False, NormalizationConfig(basic_latex, units, boxed="all"; open-r1's
  equations=True is left out: latex2sympy2_extended 1.11 deprecates it and logs a warning per answer),
  extraction_mode="first_match"): only LaTeX / \\boxed answers count, never bare prose numbers;
* combinations: ours OR math-verify (= "accept when ours accepts, else ask math-verify"; the reverse order
  gives the same verdicts, only the cost differs), "ours, math-verify only when ours finds no answer", and
  ours AND math-verify.

It prints agreement with the labels, false accepts / false rejects, a per-rule table, the time per answer
(math-verify's includes parsing the gold, as a judge built on it would per call), import times, whether
math-verify's default timeout works outside the main thread, and a recommendation computed from the numbers.
The overall agreement weights each rule by its count (about N answers per rule), so it depends on the rule
mix: read the per-rule table for what each judge gets right.

Labelling decisions (by construction, not by any judge):
* percent_sign: `\\boxed{V\\%}` is CORRECT, generated only for questions that ask for a percentage (GSM8K
  stores "60%" answers as 60, so "60%" is the asked-for quantity in the asked-for unit). Such questions are
  rare, so the percent rules use every percentage question of the test split, not only the N sampled ones.
  percent_as_fraction (`\\boxed{0.6}` for 60 when a percentage is asked) is INCORRECT.
* space_in_digits: `\\boxed{7 2}` for 72 is INCORRECT: nobody writes a number that way.
* prose_no_box: reasoning then "So the answer is 72." with no box is INCORRECT: the contract is that the final
  answer must be extractable (the last \\boxed{}, or the whole reply being the number); an answer that is only
  in prose is a format failure. bare_number (the whole reply is "72") and assign_plain ("x = 72") are
  CORRECT: the whole reply is the answer.
* units, currency, trailing ".0"/".00", `\\text{}`, equal fractions, `x = V` forms and thousands separators
  (for values >= 1000) are CORRECT; off-by-one, digit swaps, sign flips, wrong decimals, an empty box, and a
  different number boxed last (after the right one in the text or in an earlier box) are INCORRECT.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GSM8K_DIR = Path(os.environ.get("ASTUNER_GSM8K_DIR", ROOT.parent / "shared" / "data" / "gsm8k"))

_PCT_QUESTION = re.compile(r"what (is the )?percent(age)?\b|percentage (chance|of)|as a percentage|percentage\)",
                           re.I)
UNIT_WORDS = ["dollars", "apples", "hours", "miles", "students", "cookies", "pounds", "minutes"]
MATHRM_UNITS = ["cm", "km", "kg", "m", "min", "h"]


@dataclass
class Answer:
    rule: str
    label: bool
    text: str
    row: dict
    gold: str


# -- the labelled set ---------------------------------------------------------------------------------------
def load_rows(split: str = "test") -> list[dict]:
    path = GSM8K_DIR / f"{split}.jsonl"
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def gold_of(row: dict) -> str:
    return row["answer"].rsplit("####", 1)[1].strip()


def reasoning_of(row: dict) -> str:
    """The GSM8K solution without its '#### V' line and its <<calculator>> annotations: realistic reasoning
    that mentions the right number (and others, with bare $ signs) before the final answer."""
    text = row["answer"].rsplit("####", 1)[0]
    return re.sub(r"<<[^>]*>>", "", text).strip()


def asks_percentage(question: str) -> bool:
    last = re.split(r"(?<=[.!?])\s+", question.strip())[-1]
    return bool(_PCT_QUESTION.search(last))


def wrong_value(v: int, rng: random.Random) -> int:
    delta = rng.choice([-1, 1]) * rng.randint(1, max(2, abs(v) // 10 or 2))
    return v + delta if v + delta != v else v + 1


def digit_swap(v: int, rng: random.Random) -> Optional[int]:
    digits = str(abs(v))
    spots = [i for i in range(len(digits) - 1) if digits[i] != digits[i + 1] and not (i == 0 and digits[1] == "0")]
    if not spots:
        return None
    i = rng.choice(spots)
    swapped = digits[:i] + digits[i + 1] + digits[i] + digits[i + 2:]
    return int(swapped) * (1 if v >= 0 else -1)


def variants(row: dict, rng: random.Random) -> list[tuple[str, bool, str]]:
    """(rule, label, answer text) for one task; every rule that applies to its value."""
    gold = gold_of(row)
    v = int(gold.replace(",", ""))  # every GSM8K test answer is an integer
    s = str(v)
    why = reasoning_of(row)
    w = wrong_value(v, rng)
    out: list[tuple[str, bool, str]] = [
        # correct
        ("boxed_plain", True, rf"\boxed{{{s}}}"),
        ("boxed_trailing_zero", True, rf"\boxed{{{s}.0}}"),
        ("boxed_money_cents", True, rf"\boxed{{\${s}.00}}"),
        ("boxed_escaped_dollar", True, rf"\boxed{{\${s}}}"),
        ("boxed_text_unit", True, rf"\boxed{{{s} \text{{ {rng.choice(UNIT_WORDS)}}}}}"),
        ("boxed_mathrm_unit", True, rf"\boxed{{{s} \mathrm{{{rng.choice(MATHRM_UNITS)}}}}}"),
        ("boxed_text_number", True, rf"\boxed{{\text{{{s}}}}}"),
        ("boxed_trailing_period", True, rf"The answer is \boxed{{{s}.}}"),
        ("inline_math_boxed", True, rf"The answer is $\boxed{{{s}}}$."),
        ("display_math_boxed", True, rf"{why}" "\n" rf"\[\boxed{{{s}}}\]"),
        ("reasoning_then_boxed", True, rf"{why}" "\n" rf"The answer is \boxed{{{s}}}."),
        ("boxed_then_trailing_text", True,
         rf"The answer is \boxed{{{s}}}. That is {rng.randint(2, 9)} more than last week."),
        ("frac_equal", True, (lambda k: rf"\boxed{{\frac{{{k * v}}}{{{k}}}}}")(rng.randint(2, 9))),
        ("assign_plain", True, f"x = {s}"),
        ("assign_boxed", True, rf"\boxed{{x = {s}}}"),
        ("bare_number", True, s),
        # incorrect
        ("off_by_one", False, rf"\boxed{{{v + rng.choice([-1, 1])}}}"),
        ("sign_flip", False, rf"\boxed{{{-v}}}") if v != 0 else None,
        ("wrong_decimal", False, rf"\boxed{{{s}.5}}"),
        ("right_in_text_wrong_boxed", False,
         f"{why}\nSo she has {s} left. Checking again, I made an error; the answer is " rf"\boxed{{{w}}}."),
        ("two_boxes_last_wrong", False,
         rf"So the answer is \boxed{{{s}}}. Wait, I double counted. The correct answer is \boxed{{{w}}}."),
        ("empty_box", False, f"{why}\n" r"The answer is \boxed{}."),
        ("prose_no_box", False, f"{why}\nSo the answer is {s}."),
    ]
    swapped = digit_swap(v, rng)
    if swapped is not None and swapped != v:
        out.append(("digit_swap", False, rf"\boxed{{{swapped}}}"))
    if abs(v) >= 10:
        digits = str(abs(v))
        cut = rng.randint(1, len(digits) - 1)
        out.append(("space_in_digits", False,
                    rf"\boxed{{{'-' if v < 0 else ''}{digits[:cut]} {digits[cut:]}}}"))
    if abs(v) >= 1000:
        out.append(("thousands_comma", True, rf"\boxed{{{v:,}}}"))
        out.append(("thousands_latex_comma", True, rf"\boxed{{{f'{v:,}'.replace(',', '{,}')}}}"))
    return [o for o in out if o is not None]


def percent_variants(row: dict) -> list[tuple[str, bool, str]]:
    v = int(gold_of(row).replace(",", ""))
    return [("percent_sign", True, rf"\boxed{{{v}\%}}"),
            ("percent_as_fraction", False, rf"\boxed{{{v / 100:g}}}")]


def build_answers(n: int, seed: int) -> list[Answer]:
    rows = load_rows("test")
    rng = random.Random(seed)
    picked = rng.sample(rows, min(n, len(rows)))
    answers = [Answer(rule, label, text, row, gold_of(row))
               for row in picked for rule, label, text in variants(row, rng)]
    answers += [Answer(rule, label, text, row, gold_of(row))
                for row in rows if asks_percentage(row["question"]) for rule, label, text in percent_variants(row)]
    return answers


# -- the judges ---------------------------------------------------------------------------------------------
def make_ours() -> Callable[[Answer], bool]:
    from astuner.schema import Task, WorkflowOutput, WorkflowTask
    from astuner.task_judge.math_answer_as_judge import MathAnswerAsJudge

    judge = MathAnswerAsJudge()

    def ours(a: Answer) -> bool:
        task = WorkflowTask(task=Task(task_id="t", main_query=a.row["question"], metadata=a.row))
        return bool(judge.compute_reward(task, WorkflowOutput(metadata={"final_answer": a.text})).is_success)

    return ours


def ours_found_answer(a: Answer) -> bool:
    from astuner.task_judge.math_answer import extract_answer
    return extract_answer(a.text) is not None


def make_mv(boxed_only: bool) -> Callable[[Answer], bool]:
    from math_verify import LatexExtractionConfig, LatexNormalizationConfig, parse, verify

    if not boxed_only:
        def mv(a: Answer) -> bool:
            return verify(parse(a.gold), parse(a.text))
        return mv

    cfg = [LatexExtractionConfig(
        normalization_config=LatexNormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                      boxed="all", units=True),
        boxed_match_priority=0, try_extract_without_anchor=False)]

    def mv_boxed(a: Answer) -> bool:
        return verify(parse(a.gold, extraction_mode="first_match"),
                      parse(a.text, extraction_config=cfg, extraction_mode="first_match"))
    return mv_boxed


def timed(fn: Callable[[Answer], bool], answers: list[Answer]) -> tuple[list[bool], list[float]]:
    verdicts, seconds = [], []
    for a in answers:
        t0 = time.perf_counter()
        verdicts.append(bool(fn(a)))
        seconds.append(time.perf_counter() - t0)
    return verdicts, seconds


def mv_in_thread() -> str:
    """What math-verify's default (signal-based) timeout does off the main thread."""
    from math_verify import parse, verify
    box: dict = {}
    boxed = r"\boxed{72}"

    def target() -> None:
        try:
            box["default"] = f"returned {verify(parse('72'), parse(boxed))}"
        except Exception as exc:  # noqa: BLE001
            box["default"] = f"raised {type(exc).__name__}"
        try:
            ok = verify(parse("72", parsing_timeout=None), parse(boxed, parsing_timeout=None),
                        timeout_seconds=None)
            box["no_timeout"] = f"returned {ok}"
        except Exception as exc:  # noqa: BLE001
            box["no_timeout"] = f"raised {type(exc).__name__}"

    th = threading.Thread(target=target)
    th.start()
    th.join()
    return (f"default timeouts {box['default']}; with parsing_timeout=None and timeout_seconds=None it "
            f"{box['no_timeout']}")


# -- report -------------------------------------------------------------------------------------------------
def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300, help="GSM8K test ground truths to sample")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # the "timeout disabled" notice of the thread probe

    t0 = time.perf_counter()
    ours = make_ours()
    import_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        import math_verify  # noqa: F401
    except ImportError:
        sys.exit("math-verify is not installed: pip install 'math-verify[antlr4_9_3]' (keeps the ANTLR 4.9.3 "
                 "runtime that hydra-core/omegaconf need)")
    import_mv = time.perf_counter() - t0
    from importlib.metadata import version

    answers = build_answers(args.n, args.seed)
    labels = [a.label for a in answers]

    judges: dict[str, Callable[[Answer], bool]] = {"ours": ours, "math-verify": make_mv(False),
                                                   "mv-boxed": make_mv(True)}
    first_call = {}
    for name, fn in judges.items():  # first call pays lazy regex compiles / ANTLR set-up: reported apart
        t0 = time.perf_counter()
        fn(answers[0])
        first_call[name] = time.perf_counter() - t0
    verdicts, times = {}, {}
    for name, fn in judges.items():
        verdicts[name], times[name] = timed(fn, answers)

    found = [ours_found_answer(a) for a in answers]
    o, m = verdicts["ours"], verdicts["math-verify"]
    verdicts["ours|mv"] = [x or y for x, y in zip(o, m)]
    times["ours|mv"] = [to + (tm if not x else 0.0) for x, to, tm in zip(o, times["ours"], times["math-verify"])]
    verdicts["ours,mv-if-none"] = [x if f else y for x, y, f in zip(o, m, found)]
    times["ours,mv-if-none"] = [to + (tm if not f else 0.0)
                                for f, to, tm in zip(found, times["ours"], times["math-verify"])]
    verdicts["ours&mv"] = [x and y for x, y in zip(o, m)]
    times["ours&mv"] = [to + (tm if x else 0.0) for x, to, tm in zip(o, times["ours"], times["math-verify"])]

    n_pos = sum(labels)
    n_neg = len(labels) - n_pos
    n_tasks = len({id(a.row) for a in answers})
    print(f"# Math judge agreement: ours vs math-verify {version('math-verify')} "
          f"(latex2sympy2_extended {version('latex2sympy2_extended')}, "
          f"antlr4-python3-runtime {version('antlr4-python3-runtime')})")
    print()
    print(f"GSM8K test: --n {args.n} --seed {args.seed}; {n_tasks} tasks "
          f"(incl. {sum(asks_percentage(r['question']) for r in load_rows('test'))} percentage questions of the "
          f"whole split for the percent rules), {len(answers)} answers: {n_pos} labelled correct, "
          f"{n_neg} incorrect, {len({a.rule for a in answers})} rules")
    print()
    print("| judge | agreement | false accepts | false rejects | mean us/answer | median us/answer | "
          "max ms/answer |")
    print("|---|---|---|---|---|---|---|")
    for name in verdicts:
        v = verdicts[name]
        agree = sum(x == y for x, y in zip(v, labels)) / len(labels)
        fa = sum(x and not y for x, y in zip(v, labels))
        fr = sum(y and not x for x, y in zip(v, labels))
        ts = times[name]
        print(f"| {name} | {pct(agree)} | {fa}/{n_neg} ({pct(fa / n_neg)}) | {fr}/{n_pos} ({pct(fr / n_pos)}) | "
              f"{1e6 * statistics.mean(ts):.0f} | {1e6 * statistics.median(ts):.0f} | {1e3 * max(ts):.1f} |")
    print()
    print("ours|mv = accept when ours accepts, else ask math-verify (same verdicts as the reverse order); "
          "ours,mv-if-none = ours, math-verify only when ours extracts no answer; ours&mv = both must accept. "
          "Combination times: ours plus math-verify where it is asked.")
    print()
    rules = list(dict.fromkeys(a.rule for a in answers))
    cols = list(verdicts)
    print("| rule | label | n | " + " | ".join(cols) + " |")
    print("|---|---|---|" + "---|" * len(cols))
    for rule in rules:
        idx = [i for i, a in enumerate(answers) if a.rule == rule]
        label = answers[idx[0]].label
        cells = [pct(sum(verdicts[c][i] == labels[i] for i in idx) / len(idx)) for c in cols]
        print(f"| {rule} | {'correct' if label else 'incorrect'} | {len(idx)} | " + " | ".join(cells) + " |")
    print()
    print(f"Import: astuner judge {1e3 * import_ours:.0f} ms, math_verify {1e3 * import_mv:.0f} ms. "
          "First call (lazy set-up): " + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in first_call.items()) + ".")
    print(f"math-verify in a non-main thread: {mv_in_thread()}.")
    print()
    examples = {}
    for i, a in enumerate(answers):
        if o[i] != m[i] and (a.rule, o[i]) not in examples:
            examples[(a.rule, o[i])] = a
    print("Disagreements, one example per (rule, direction):")
    for (rule, o_verdict), a in examples.items():
        text = a.text if len(a.text) < 90 else "..." + a.text[-87:]
        print(f"- {rule}: gold {a.gold}, ours {'accepts' if o_verdict else 'rejects'}, math-verify "
              f"{'rejects' if o_verdict else 'accepts'}: {text!r}")
    print()
    agreement = {k: sum(x == y for x, y in zip(v, labels)) / len(labels) for k, v in verdicts.items()}
    false_accepts = {k: sum(x and not y for x, y in zip(v, labels)) for k, v in verdicts.items()}
    # A false accept rewards a wrong answer, which RL learns to exploit; and the overall agreement depends on the
    # rule mix (each rule has about N answers). So: the highest agreement among the judges that add no false
    # accepts to ours; ties go to the faster one.
    allowed = [k for k in verdicts if false_accepts[k] <= false_accepts["ours"]]
    best = min(allowed, key=lambda k: (-agreement[k], statistics.mean(times[k])))
    ours_wrong = [r for r in rules if any(answers[i].rule == r and o[i] != labels[i] for i in range(len(answers)))]
    others = ", ".join(f"{k} {pct(agreement[k])} / {false_accepts[k]} FA" for k in verdicts if k != best)
    print(f"Recommendation: {best} ({pct(agreement[best])} agreement, {false_accepts[best]} false accepts, "
          f"{1e6 * statistics.mean(times[best]):.0f} us/answer; rule: highest agreement among judges with no more "
          f"false accepts than ours; {others}); rules ours gets wrong: {', '.join(ours_wrong) or 'none'}.")

if __name__ == "__main__":
    main()
