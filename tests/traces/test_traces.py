"""`astuner traces import / check / list`: OpenAI-format chat logs rendered through the chat template into a
trace store (grouped, rewarded, checked: a normalising tokenizer's lost text is named), a store's episodes
checked against the model's template (a `<think>`-dropping history), the listing, the errors."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sqlite3


from astuner.records.trace_store import TraceStore
from tests.conftest import run_cli

TOOLS = [{"type": "function", "function": {"name": "read_sensor", "description": "Read the sensor.",
                                           "parameters": {"type": "object", "properties": {}}}}]
ASK = [{"role": "system", "content": "Call read_sensor, then answer."},
       {"role": "user", "content": "What does sensor S1 read?"}]
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "read_sensor", "arguments": "{}"}}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "497"}


def write_log(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_import_renders_groups_rewards_and_reports(tiny_model_dir, tokenizer, tmp_path, capsys):
    log = write_log(tmp_path / "log.jsonl", [
        # an episode of two calls in the request/response shape, rewarded on its last line
        {"session_id": "t1", "request": {"messages": ASK, "tools": TOOLS},
         "response": {"choices": [{"message": CALL}]}},
        {"session_id": "t1", "request": {"messages": ASK + [CALL, RESULT], "tools": TOOLS},
         "response": {"choices": [{"message": {"role": "assistant", "content": "It reads \\boxed{497}."}}]},
         "reward": 1.0},
        # the fine-tuning shape: the reply is the last message
        {"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]},
        "{not json", {"messages": [{"role": "user", "content": "no reply"}]},
        {"request": {"messages": ASK}, "response": {"choices": []}},
        # a Responses API call and a request that is not an object: each its own reason
        {"request": {"model": "m", "input": "What does sensor S1 read?"},
         "response": {"object": "response", "output": [{"type": "message", "content": []}]}},
        {"request": ["not", "an", "object"], "response": {"choices": [{"message": CALL}]}},
    ])
    store = tmp_path / "traces.db"
    code, out, err = run_cli(["traces", "import", str(log), "--store", str(store), "--model", str(tiny_model_dir),
                              "--json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert (report["lines"], report["episodes"], report["calls"], report["rewards"]) == (8, 2, 3, 1)
    assert [s.split(":")[0] for s in report["skipped"]] == ["line 4", "line 5", "line 6", "line 7", "line 8"]
    assert report["skipped"][2] == "line 6: a request without a response (no choices)"
    assert report["skipped"][3].startswith("line 7: an OpenAI Responses API call (request.input, response.output)")
    assert report["skipped"][4] == "line 8: its 'request' is not a JSON object"
    assert report["check"] == {"episodes": 2, "passed": 2, "causes": {}, "failed": []}
    assert "imported 3 calls in 2 episodes (1 with a reward) from 8 lines" in err

    reader = TraceStore.read(store)
    (t1, hello) = reader.episodes()
    assert (t1["id"], t1["source"], t1["calls"], t1["reward"]) == ("t1", "imported:openai", 2, 1.0)
    # a line without a session: an episode named by its content (another log's line 3 is another episode)
    assert re.fullmatch(r"line-[0-9a-f]{16}", hello["id"]) and (hello["calls"], hello["reward"]) == (1, None)
    first, second = reader.calls("t1")
    assert first.prompt_ids == tokenizer(tokenizer.apply_chat_template(
        ASK, tools=TOOLS, add_generation_prompt=True, tokenize=False), add_special_tokens=False)["input_ids"]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert first.response_ids[-1] == end and end not in first.response_ids[:-1]
    assert first.response_text == '<tool_call>\n{"name": "read_sensor", "arguments": {}}\n</tool_call>'
    assert second.response_text == "It reads \\boxed{497}." and first.logprobs == []
    # the second call's prompt is the first's conversation, its reply included: it continues it, id for id
    assert second.prompt_ids[:len(first.prompt_ids) + len(first.response_ids)] == first.prompt_ids + first.response_ids

    # importing again: the episodes are there already, nothing doubled
    code, out, err = run_cli(["traces", "import", str(log), "--store", str(store), "--model", str(tiny_model_dir)],
                             capsys)
    assert code == 0 and "imported 0 calls in 0 episodes" in err and "is in the store already" in err
    code, out, err = run_cli(["traces", "list", str(store)], capsys)
    assert code == 0 and out.splitlines()[1].split() == ["t1", "imported:openai", "2", "1"]
    assert "2 episodes, 1 with a reward" in err
    # another log whose first line has no session either: its episode is added, not taken for the first log's
    other = write_log(tmp_path / "other.jsonl", [
        {"messages": [{"role": "user", "content": "hello again"}, {"role": "assistant", "content": "hi"}]}])
    code, out, err = run_cli(["traces", "import", str(other), "--store", str(store), "--model", str(tiny_model_dir)],
                             capsys)
    assert code == 0 and "imported 1 calls in 1 episodes" in err, err[-1000:]


def test_import_names_text_the_tokenizer_cannot_give_back(tiny_model_dir, tmp_path, capsys):
    from tokenizers import normalizers
    from transformers import AutoTokenizer

    model = tmp_path / "normalising"
    shutil.copytree(tiny_model_dir, model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.backend_tokenizer.normalizer = normalizers.NFKC()  # as SentencePiece models normalise their input
    tokenizer.save_pretrained(model)
    # loaded as its tokenizer.json says (a Qwen2 model's config would have transformers set its own normaliser)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "TokenizersBackend"}))
    (model / "config.json").write_text("{}")  # only its tokenizer is read here
    assert type(AutoTokenizer.from_pretrained(model).backend_tokenizer.normalizer).__name__ == "NFKC"
    log = write_log(tmp_path / "log.jsonl", [
        {"session_id": "plain", "messages": [{"role": "user", "content": "the file"}, {"role": "assistant", "content": "ok"}]},
        {"session_id": "ligature", "messages": [{"role": "user", "content": "the \ufb01le"},
                                                {"role": "assistant", "content": "ok"}]},
        {"session_id": "in-reply", "messages": [{"role": "user", "content": "the file"},
                                                {"role": "assistant", "content": "\ufb01ne"}]}])
    code, out, err = run_cli(["traces", "import", str(log), "--store", str(tmp_path / "t.db"), "--model", str(model)],
                             capsys)
    assert code == 0, err
    assert "1 of 3 episodes give the tokens recorded (mismatched calls by cause: round_trip 2)" in err
    assert "episodes a re-render would change: ligature, in-reply" in err


def test_check_names_a_served_episode_whose_history_the_template_renders_otherwise(tiny_model_dir, tokenizer,
                                                                                  tmp_path, capsys):
    from tests.model.test_rerender import as_text, recorded

    store = TraceStore.open_for_writing(tmp_path / "t.db")
    for name, replies in (("clean", ["It is 4.", "Yes."]), ("thinking", ["<think>2+2</think>It is 4.", "Yes."])):
        for record in recorded(tokenizer, replies, as_text):
            store.add_call(name, record)
    store.close()
    code, out, err = run_cli(["traces", "check", str(tmp_path / "t.db"), "--model", str(tiny_model_dir), "--json"],
                             capsys)
    assert code == 0, err
    # the first call's reply rebuilt from its message loses its <think> block (the template renders the content
    # only), and the second call's history the same block
    assert json.loads(out) == {"episodes": 2, "passed": 1, "causes": {"reply_think": 1, "think": 1},
                               "failed": ["thinking"]}
    assert "mismatched calls by cause: reply_think 1, think 1" in err


def test_traces_errors_are_one_line(tiny_model_dir, tmp_path, capsys):
    write_log(tmp_path / "log.jsonl", [{"messages": ASK + [{"role": "assistant", "content": "4"}]}])
    write_log(tmp_path / "empty.jsonl", ["{not json"])
    with sqlite3.connect(tmp_path / "other.sqlite") as conn:  # another program's database
        conn.execute("CREATE TABLE span_table (id TEXT)")
        conn.execute("CREATE TABLE users (id TEXT)")
    lock = TraceStore.open_for_writing(tmp_path / "busy.db")
    try:
        cases = {
            "no model call to import (1 lines; the first skipped: line 1:": [
                "import", str(tmp_path / "empty.jsonl"), "--store", str(tmp_path / "t.db"), "--model",
                str(tiny_model_dir)],
            "another program's SQLite database (tables: span_table, users)": [
                "import", str(tmp_path / "log.jsonl"), "--store", str(tmp_path / "other.sqlite"), "--model",
                str(tiny_model_dir)],
            "not a text file": ["import", str(tmp_path / "other.sqlite"), "--format", "openai", "--store",
                                str(tmp_path / "t.db"), "--model", str(tiny_model_dir)],
            "no such file": ["import", str(tmp_path / "missing.jsonl"), "--store", str(tmp_path / "t.db"), "--model",
                             str(tiny_model_dir)],
            "name a model folder": ["import", str(tmp_path / "log.jsonl"), "--store", str(tmp_path / "t.db"),
                                    "--model", "base_url=http://127.0.0.1:9/v1,model=m"],
            "writes to it": ["import", str(tmp_path / "log.jsonl"), "--store", str(tmp_path / "busy.db"), "--model",
                             str(tiny_model_dir)],
            "trace store": ["list", str(tmp_path / "log.jsonl")],
        }
        for needle, args in cases.items():
            code, out, err = run_cli(["traces", *args], capsys)
            lines = [line for line in err.splitlines() if line.startswith("astuner: error:")]
            assert code == 2 and len(lines) == 1 and needle in lines[0], (needle, err[-800:])
    finally:
        lock.close()
    assert not (tmp_path / "t.db").exists()  # nothing refused left a store behind
    with sqlite3.connect(tmp_path / "other.sqlite") as conn:  # nor wrote into another program's database
        assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master")} == {"span_table", "users"}
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    asyncio.run(asyncio.sleep(0))


def test_an_episode_with_a_line_it_cannot_read_is_left_out_whole(tiny_model_dir, tmp_path, capsys):
    log = write_log(tmp_path / "log.jsonl", [
        {"session_id": "t1", "messages": ASK + [CALL]},
        {"session_id": "t1", "messages": ASK + [CALL, RESULT, {"role": "assistant", "content": "497"}]},
        {"session_id": "t1", "messages": ASK + [CALL, RESULT, {"role": "assistant", "content": "497"}],
         "reward": "good"},  # no number: the line is skipped, and its episode with it
        {"session_id": "t2", "messages": ASK + [{"role": "assistant", "content": "497"}]},
    ])
    code, out, err = run_cli(["traces", "import", str(log), "--store", str(tmp_path / "t.db"), "--model",
                              str(tiny_model_dir), "--json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert (report["lines"], report["episodes"], report["calls"]) == (4, 1, 1)  # lines read, not skips said
    assert report["skipped"] == ["line 3: reward 'good' is not a finite number",
                                 "line 1: episode 't1' left out whole (2 other calls): a call of it is skipped above"]
    assert [e["id"] for e in TraceStore.read(tmp_path / "t.db").episodes()] == ["t2"]


def test_a_log_with_a_nan_reward_leaves_nothing_half_written_and_its_fixed_rerun_stores_everything(
        tiny_model_dir, tmp_path, capsys):
    """`"reward": NaN` on an episode's second line (Python's json reads NaN, Infinity and 1e400 as floats): the
    episode is left out whole, the others stored whole; the fixed log imported again adds it with its reward."""
    rows = [{"session_id": "e1", "messages": ASK + [{"role": "assistant", "content": "497"}], "reward": 1.0},
            {"session_id": "e2", "messages": ASK + [CALL]},
            {"session_id": "e2", "messages": ASK + [CALL, RESULT, {"role": "assistant", "content": "497"}],
             "reward": 0.5},
            {"session_id": "e3", "messages": ASK + [{"role": "assistant", "content": "12"}], "reward": 0.0},
            {"session_id": "e4", "messages": ASK + [{"role": "assistant", "content": "13"}], "reward": 0.0}]
    log = tmp_path / "log.jsonl"
    lines = [json.dumps(row) for row in rows]
    lines[2] = lines[2].replace('"reward": 0.5', '"reward": NaN')
    lines[3] = lines[3].replace('"reward": 0.0', '"reward": Infinity')
    lines[4] = lines[4].replace('"reward": 0.0', '"reward": 1e400')
    log.write_text("\n".join(lines) + "\n")
    store = tmp_path / "t.db"
    args = ["traces", "import", str(log), "--store", str(store), "--model", str(tiny_model_dir), "--json"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["skipped"][:3] == ["line 3: reward nan is not a finite number",
                                     "line 4: reward inf is not a finite number",
                                     "line 5: reward inf is not a finite number"], report["skipped"]
    reader = TraceStore.read(store)
    assert [(e["id"], e["calls"], e["reward"]) for e in reader.episodes()] == [("e1", 1, 1.0)]
    assert reader._conn.execute("SELECT COUNT(*) FROM calls WHERE episode_id = 'e2'").fetchone() == (0,)

    log.write_text("\n".join(json.dumps(row) for row in rows) + "\n")  # fixed
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert json.loads(out)["episodes"] == 3
    assert sorted((e["id"], e["calls"], e["reward"]) for e in TraceStore.read(store).episodes()) == [
        ("e1", 1, 1.0), ("e2", 2, 0.5), ("e3", 1, 0.0), ("e4", 1, 0.0)]


def test_a_line_over_the_limit_is_skipped_unread_and_a_call_over_the_context_left_out(tiny_model_dir, tmp_path,
                                                                                      capsys):
    from astuner.traces.importer import read_log

    log = tmp_path / "log.jsonl"
    big = json.dumps({"session_id": "big", "messages": ASK + [{"role": "assistant", "content": "x" * 5000}]})
    small = json.dumps({"session_id": "ok", "messages": ASK + [{"role": "assistant", "content": "497"}]})
    log.write_text(f"{small}\n{big}\n{small.replace('ok', 'ok2')}\n")
    calls, skipped, lines = read_log(log, max_line_bytes=1000)
    assert [c.episode for c in calls] == ["ok", "ok2"] and lines == 3
    assert skipped == ["line 2: over 1000 bytes, longer than any call (not read)"]
    # within the line limit, over the model's context (the tiny model's max_position_embeddings)
    long = json.dumps({"session_id": "long", "messages": ASK + [{"role": "assistant", "content": " 7 x" * 6000}]})
    log.write_text(f"{small}\n{long}\n")
    code, out, err = run_cli(["traces", "import", str(log), "--store", str(tmp_path / "t.db"), "--model",
                              str(tiny_model_dir), "--json"], capsys)
    assert code == 0, err
    skipped = json.loads(out)["skipped"]
    assert len(skipped) == 1 and re.fullmatch(r"line 2: episode 'long': \d+ tokens, over the model's context of "
                                              r"\d+", skipped[0]), skipped
    assert [e["id"] for e in TraceStore.read(tmp_path / "t.db").episodes()] == ["ok"]


def test_lines_of_other_shapes_and_text_that_is_no_unicode_are_skipped_with_their_reason(tiny_model_dir, tmp_path,
                                                                                      capsys):
    log = tmp_path / "log.jsonl"
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    log.write_text("\n".join([json.dumps({"messages": "hi"}), json.dumps({"messages": ["hi", "there"]}),
                              json.dumps({"messages": {"a": 1}}),
                              '{"messages": [{"role": "user", "content": "\\ud800"}, {"role": "assistant", '
                              '"content": "x"}]}',
                              json.dumps({"request": {"messages": [{"role": "user", "content": "q"}]},
                                          "response": {"choices": [5]}}),
                              json.dumps({**good, "session_id": {"a": 1}}), json.dumps(good)]) + "\n")
    code, out, err = run_cli(["traces", "import", str(log), "--store", str(tmp_path / "t.db"), "--model",
                              str(tiny_model_dir), "--json"], capsys)
    assert code == 0, err[-2000:]
    report = json.loads(out)
    assert report["skipped"] == [
        "line 1: its messages are not a list of message objects ({role, content})",
        "line 2: its messages are not a list of message objects ({role, content})",
        "line 3: its messages are not a list of message objects ({role, content})",
        "line 4: it holds text that is not valid Unicode (a lone surrogate escape)",
        "line 5: its response's choices[0].message is not a message object",
        "line 6: its session_id {'a': 1} is not a string"], report["skipped"]
    assert report["episodes"] == 1
    for path, needle in [(tmp_path, "a folder, not a chat log"), (tmp_path / "none.jsonl", "no such file")]:
        code, _, err = run_cli(["traces", "import", str(path), "--store", str(tmp_path / "t.db"), "--model",
                                str(tiny_model_dir)], capsys)
        assert code == 2 and needle in err, err[-1000:]
    code, _, err = run_cli(["traces", "list", str(tmp_path)], capsys)
    assert code == 2 and "a folder, not a trace store's file" in err
