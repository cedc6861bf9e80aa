"""The rows each sample trains on, written into a copy of its folder the way its README prepares them, from local
sources only (no hub): a few rows of each game's task list, GSM8K rows (with the difficulty features data_augment's
config_difficulty.yaml selects by), and for email_search an inbox of a few emails put through the sample's own
prepare_data.py (its SQLite schema, full-text index and filters) plus questions about them. Shared by
tests/samples and bench/samples_matrix.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROWS = {"werewolves": [{"seed": i} for i in range(4)],
        "frozen_lake": [{"seed": i, "size": 3, "p": 0.8, "index": i, "uid": f"lake-{i}"} for i in range(4)],
        "learn_to_ask": [{"messages": [{"role": "user", "content": f"I have had a headache for {i + 1} days."}],
                          "decision_truth": "stop" if i % 2 else "continue", "info_truth": "fever, nausea"}
                         for i in range(4)]}
INBOX = "pete.davis@enron.com"
EMAILS = [  # (subject, body, date): sent to INBOX by a colleague
    ("Schedule variances for 3/9/01", "Variances were detected in Generation and Energy Import/Export for hour 6.",
     "2001-03-10 08:15:00"),
    ("Curve assessment colors", "Red means the curve moved over 10%, yellow between 5% and 10%, green below 5%.",
     "2001-04-02 17:40:00"),
    ("Lunch on Friday", "Shall we meet at the cafe on Louisiana Street at noon on Friday?", "2001-03-14 11:02:00"),
    ("Desk move", "Your desk moves to the 32nd floor on Monday; boxes arrive on Thursday.", "2001-03-20 09:30:00"),
]
QUESTIONS = [  # (question, answer, the email it is in)
    ("Were there any variances detected for hour 6 on 3/9/01?",
     "Yes, in Generation and Energy Import/Export schedules.", 0),
    ("What do the color codes mean in the curve assessment?",
     "Red over 10%, yellow between 5% and 10%, green below 5%.", 1),
    ("Where is lunch on Friday?", "At the cafe on Louisiana Street at noon.", 2),
    ("Which floor does my desk move to?", "The 32nd floor, on Monday.", 3),
]


def message_id(i: int) -> str:
    return f"<{17407857 + i}.1075840601283.JavaMail.evans@thyme>"


def gsm8k_rows(gsm8k_dir: Path, count: int = 8) -> list[dict]:
    return [json.loads(line) for line in (gsm8k_dir / "train.jsonl").read_text().splitlines()[:count]]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def prepare_email_search(folder: Path, python: str) -> Path:
    """The README's preparation: the sample's prepare_data.py builds the inbox's SQLite database from an emails
    dataset (here a local copy laid out as the hub's corbt/enron-emails rows), run with `python`; the questions
    go to data/train.jsonl. Returns the database's path (the README's DEFAULT_EMAIL_DB_PATH)."""
    emails = [{"message_id": message_id(i), "subject": subject, "from": "kate.symes@enron.com", "to": [INBOX],
               "cc": [], "bcc": [], "date": date, "body": body, "file_name": f"davis-p/inbox/{i + 1}."}
              for i, (subject, body, date) in enumerate(EMAILS)]
    write_jsonl(folder / "enron_emails" / "train.jsonl", emails)
    db = (folder / "data" / "enron_emails.db").resolve()
    subprocess.run([python, "-c", "import sys, prepare_data; prepare_data.generate_database(repo_id=sys.argv[1], "
                    "db_path=sys.argv[2], overwrite=True)", str(folder / "enron_emails"), str(db)],
                   cwd=folder, check=True, capture_output=True, text=True, timeout=300)
    write_jsonl(folder / "data" / "train.jsonl",
                [{"id": i, "question": q, "answer": a, "message_ids": [message_id(e)], "how_realistic": 0.8,
                  "inbox_address": INBOX, "query_date": "2001-04-30"}
                 for i, (q, a, e) in enumerate(QUESTIONS)])
    return db


def prepare(sample: str, folder: Path, gsm8k_dir: Path, python: str) -> dict[str, str]:
    """Writes the sample's data into its folder; returns the environment its README has the user export."""
    if sample == "email_search":
        return {"DEFAULT_EMAIL_DB_PATH": str(prepare_email_search(folder, python))}
    if sample == "data_augment":  # prepare_data.py's GSM8K format with the difficulty features it keeps
        rows = gsm8k_rows(gsm8k_dir)
        for i, row in enumerate(rows):
            row.update({"qwen2.5_7b_pass_rate": round(0.1 * i, 2), "qwen3_30b_pass_rate": round(0.1 * i + 0.2, 2)})
        write_jsonl(folder / "data" / "train.jsonl", rows)
    elif sample == "math_agent":  # a local copy laid out as the hub's openai/gsm8k: its subset "main"
        write_jsonl(folder / "data" / "main" / "train.jsonl", gsm8k_rows(gsm8k_dir))
        (folder / "data" / "README.md").write_text("---\nconfigs:\n- config_name: main\n  data_files:\n"
                                                   "  - split: train\n    path: main/train.jsonl\n---\n")
    else:
        write_jsonl(folder / "data" / "train.jsonl", ROWS[sample])
    return {}
