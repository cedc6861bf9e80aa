"""`astuner eval` on the main job's config (the sensor ReActAgent: a tool call, then the answer), its candidates
as a user has them: the base model, a run's checkpoint, a LoRA run's checkpoint (and the same merged by
`astuner merge-lora`), and an OpenAI-compatible endpoint (a local server, through the openai SDK)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from astuner.viewer.data import RunData
from tests.conftest import REPO_ROOT, run_cli
from tests.evaluate.scripted_endpoint import KEY, ScriptedEndpoint

CONF = REPO_ROOT / "tutorial" / "example_agent_cpu" / "sensor_agent.yaml"
SHORT = ["astuner.trainer_common.total_training_steps=1", "astuner.trainer_common.sft.steps=30",
         "astuner.data.train_batch_size=2", "astuner.rollout.num_repeat=2"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """The main job's config, a short warm start (30 SFT steps: the weights move) and one RL step, with full weights
    and with LoRA (each run's checkpoint global_step_1); the tiny model it starts from; the LoRA checkpoint
    merged."""
    from astuner.cli import main

    root = tmp_path_factory.mktemp("eval_runs")
    model = root / "model"
    runs = root / "runs"
    for name, extra in (("full", []), ("lora", ["+astuner.model.lora.rank=8"])):
        code = main(["--conf", str(CONF), "--exp-dir", str(runs), f"astuner.experiment_name={name}",
                     f"astuner.model.path={model}", *SHORT, *extra])
        assert code == 0, name
    merged = root / "merged"
    assert main(["merge-lora", str(runs / "lora" / "checkpoints" / "global_step_1"), "--out", str(merged)]) == 0
    return {"model": model, "full": runs / "full" / "checkpoints" / "global_step_1",
            "lora": runs / "lora" / "checkpoints" / "global_step_1", "merged": merged}


@pytest.fixture
def endpoint():
    server = ScriptedEndpoint()
    yield server
    server.close()


def responses(out: Path, step: int) -> dict[tuple, str]:
    rows = [json.loads(line) for line in (out / "trajectories" / f"step_{step}.jsonl").read_text().splitlines()]
    return {(r["task_id"], r["repeat_index"], r["episode_uuid"]): r["response"] for r in rows}


def test_eval_compares_a_checkpoint_a_lora_checkpoint_and_an_endpoint(trained, endpoint, tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.setenv("EVAL_TEST_KEY", KEY)
    out = tmp_path / "eval"
    code, table, err = run_cli(
        ["eval", "--conf", str(CONF), "--limit", "6", "--k", "2", "--out", str(out),
         "--model", f"label=base,path={trained['model']}", "--model", str(trained["full"]),
         "--model", f"label=lora,path={trained['lora']}", "--model", f"label=merged,path={trained['merged']}",
         "--model", f"base_url={endpoint.base_url},model=careful,api_key_env=EVAL_TEST_KEY"], capsys)
    assert code == 0, err[-3000:]
    result = json.loads((out / "eval.json").read_text())
    labels = [m["label"] for m in result["models"]]
    assert labels == ["base", "checkpoints/global_step_1", "lora", "merged", "careful"]
    assert result["split"] == "val" and result["tasks"] == 6 and result["k"] == 2
    for step, m in enumerate(result["models"], start=1):
        assert m["step"] == step and m["episodes"] == 12 and m["tasks"] == 6 and m["failed"] == 0
        for key in ("reward", "success"):
            low, high = m[key]["ci95"]
            assert low <= m[key]["mean"] <= high
        assert set(m["pass@k"]) == {"1", "2"} and m["pass@k"]["1"] == pytest.approx(m["success"]["mean"])
        assert m["avg@2"] == pytest.approx(m["reward"]["mean"])
        assert set(m["per_episode"]) == {"calls", "prompt_tokens", "completion_tokens", "tool_parse_failures"}
        assert m["per_episode"]["calls"] >= 1 and m["per_episode"]["prompt_tokens"] > 0 and m["wall_s"] > 0
        assert label_in_table(table, m["label"])

    # the endpoint played the agent through the openai SDK: the tool call, then the answer from its result
    careful = result["models"][4]
    assert careful["reward"]["mean"] == 1.0 and careful["pass@k"]["2"] == 1.0
    assert careful["per_episode"]["calls"] == 2.0 and careful["per_episode"]["completion_tokens"] == 14.0
    check, *agent = endpoint.requests  # the endpoint checked once (a one-token reply) before any model ran
    assert check["max_tokens"] == 1 and "tools" not in check
    assert len(agent) == 24 and {r["authorization"] for r in endpoint.requests} == {f"Bearer {KEY}"}
    assert all(r["model"] == "careful" and r["tools"][0]["function"]["name"] == "read_sensor" for r in agent)
    answered = [r for r in agent if r["messages"][-1]["role"] == "tool"]
    assert len(answered) == 12 and all(r["messages"][-2]["tool_calls"][0]["function"]["arguments"] == "{}"
                                       for r in answered)
    # each pair's difference on the same tasks: the endpoint's gain over the random tiny model is told from noise
    pairs = {(d["a"], d["b"]): d for d in result["differences"]}
    assert len(pairs) == 10
    gain = pairs[("base", "careful")]["reward"]
    assert gain["mean"] > 0.9 and gain["ci95"][0] > 0 and gain["excludes_0"]
    assert "careful - base: reward" in table

    # the LoRA checkpoint is its adapter over the base: episode for episode what the merged model says
    assert responses(out, 3) == responses(out, 4) != responses(out, 1)
    assert result["models"][2]["per_task"] == result["models"][3]["per_task"]
    # every model played the same episodes (ids from the same tags: paired task by task, seed by seed)
    assert len({frozenset(k[:2] for k in responses(out, s)) for s in range(1, 6)}) == 1

    # astuner view opens the folder: a model's episodes under its label, the figures from eval.json
    data = RunData(out)
    run = data.run()
    assert run["labels"] == {str(i): label for i, label in enumerate(labels, start=1)}
    assert [m["label"] for m in run["eval"]["models"]] == labels and "per_task" not in run["eval"]["models"][0]
    step = data.step(5)
    assert step["label"] == "careful" and len(step["episodes"]) == 12
    assert all(e["reward"] == 1.0 and e["calls"] == 2 and e["tokens"] == 14 for e in step["episodes"])
    assert data.episode(1, step["episodes"][0]["episode_uuid"])["samples"]  # a local model's tokens are kept


def label_in_table(table: str, label: str) -> bool:
    return any(line.startswith(label + " ") for line in table.splitlines())


def test_eval_refuses_what_it_cannot_run_in_one_line(trained, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("EVAL_TEST_KEY", raising=False)
    base = ["eval", "--conf", str(CONF), "--limit", "2", "--k", "1"]
    (tmp_path / "taken").mkdir()
    (tmp_path / "verl" / "global_step_2" / "actor").mkdir(parents=True)
    (tmp_path / "no_weights").mkdir()  # a config and a tokenizer, no weights
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (trained["model"] / name).is_file():
            (tmp_path / "no_weights" / name).write_bytes((trained["model"] / name).read_bytes())
    (tmp_path / "taken" / "eval.json").write_text("{}")
    cases = {
        "no such folder": ["--model", str(tmp_path / "missing")],
        "model= is missing": ["--model", "base_url=http://127.0.0.1:9/v1"],
        "EVAL_TEST_KEY is not set": ["--model", "base_url=http://127.0.0.1:9/v1,model=m,api_key_env=EVAL_TEST_KEY"],
        "must start with http": ["--model", "base_url=ftp://x,model=m"],
        "unknown temperature": ["--model", "base_url=http://127.0.0.1:9/v1,model=m,temperature=0"],
        "api_key= would put a key on the command line": ["--model", "base_url=http://x/v1,model=m,api_key=sk-SECRET"],
        "given twice": ["--model", "base_url=http://x/v1,model=m,model=n"],
        "a run folder, not a checkpoint; name one of its checkpoints": ["--model", str(trained["full"].parent.parent)],
        "is named twice": ["--model", str(trained["model"]), "--model", str(trained["model"])],
        "cannot load a model from": ["--model", str(tmp_path / "no_weights")],
        "is a file": ["--model", str(trained["model"]), "--out", str(tmp_path / "taken" / "eval.json")],
        "two models are labelled": ["--model", f"label=a,path={trained['model']}", "--model",
                                    f"label=a,path={trained['full']}"],
        "holds no model": ["--model", str(tmp_path / "taken")],
        "merge it into a model folder first": ["--model", str(tmp_path / "verl" / "global_step_2")],
        "exists and is not empty": ["--model", str(trained["model"]), "--out", str(tmp_path / "taken")],
        "--limit must be at least 1": ["--model", str(trained["model"]), "--limit", "0"],
        "--out is empty: name a new folder": ["--model", str(trained["model"]), "--out", ""],
    }
    for needle, args in cases.items():
        code, out, err = run_cli([*base, *args], capsys)
        lines = [line for line in err.splitlines() if line.startswith("astuner: error:")]
        assert code == 2 and len(lines) == 1 and needle in lines[0], (needle, err[-1500:])
        assert "SECRET" not in err
    assert (tmp_path / "taken" / "eval.json").read_text() == "{}"  # nothing overwritten
    # no validation split: said, with what to do
    code, out, err = run_cli([*base, "--model", str(trained["model"]), "--out", str(tmp_path / "e"),
                              "astuner.task_reader.dataset_file.validation.file_path=null"], capsys)
    assert code == 2 and "holds no tasks; evaluate on --split train" in err, err[-1500:]


def test_eval_of_an_agent_with_its_own_openai_client_goes_through_the_gateway(trained, endpoint, tmp_path, capsys,
                                                                             monkeypatch):
    """The openai-SDK sensor agent (tutorial/example_openai_agent): its calls reach the local model and the
    endpoint through the episode's gateway key, recorded as the episode's."""
    from astuner.evaluate import runner

    monkeypatch.setenv("EVAL_TEST_KEY", KEY)
    monkeypatch.setattr(runner, "PROGRESS_EVERY_S", 0.0)  # a progress line per episode (no terminal here)
    out = tmp_path / "eval"
    conf = REPO_ROOT / "tutorial" / "example_openai_agent" / "openai_agent.yaml"
    code, table, err = run_cli(
        ["eval", "--conf", str(conf), "--limit", "3", "--k", "2", "--out", str(out),
         "--model", f"label=warm,path={trained['full']}",
         "--model", f"base_url={endpoint.base_url},model=careful,api_key_env=EVAL_TEST_KEY"], capsys)
    assert code == 0, err[-3000:]
    warm, careful = json.loads((out / "eval.json").read_text())["models"]
    assert warm["failed"] == careful["failed"] == 0
    assert warm["per_episode"]["calls"] >= 1 and warm["per_episode"]["completion_tokens"] > 0
    assert careful["reward"]["mean"] == 1.0 and careful["per_episode"]["calls"] == 2.0
    agent = [r for r in endpoint.requests if r.get("tools")]
    assert len(agent) == 12 == len(endpoint.requests) - 1
    assert all(r["tools"][0]["function"]["name"] == "read_sensor" for r in agent)
    log = (out / "eval.log").read_text()
    assert "eval warm: 1/6, reward" in log and ", eta " in log and "eval careful: 5/6" in log

    # an endpoint that fails every call of the agent: one line naming the model and the first error, exit 2; the
    # tracebacks in eval.log, not on the console; the model before it keeps its figures in eval.json
    bad = tmp_path / "bad"
    code, _, err = run_cli(["eval", "--conf", str(conf), "--limit", "2", "--k", "2", "--out", str(bad), "--model",
                            f"label=warm,path={trained['full']}", "--model",
                            f"base_url={endpoint.base_url},model=broken,api_key_env=EVAL_TEST_KEY"], capsys)
    lines = [line for line in err.splitlines() if line.startswith("astuner: error:")]
    assert code == 2 and len(lines) == 1, err[-2000:]
    assert "--model broken: every one of its 4 episodes failed" in lines[0] and "500" in lines[0], lines[0]
    assert "eval.json holds the 1 model(s) before it" in lines[0]
    assert "Traceback" not in err and len(err.splitlines()) < 30, err[-3000:]
    assert "Traceback" in (bad / "eval.log").read_text()
    partial = json.loads((bad / "eval.json").read_text())
    assert [m["label"] for m in partial["models"]] == ["warm"] and "broken" in partial["incomplete"]

    # a wrong key, an unreachable server, a model the server does not have: one line before anything is loaded,
    # and no output folder left behind
    monkeypatch.setenv("EVAL_TEST_KEY", "sk-wrong")
    dead = endpoint.base_url.rsplit(":", 1)[0] + ":9/v1"
    for spec, needle in [(f"base_url={endpoint.base_url},model=careful,api_key_env=EVAL_TEST_KEY",
                          "answered HTTP 401: the key was refused"),
                         (f"base_url={dead},model=careful", "cannot reach")]:
        code, _, err = run_cli(["eval", "--conf", str(conf), "--out", str(tmp_path / "never"), "--model", spec],
                               capsys)
        lines = [line for line in err.splitlines() if line.startswith("astuner: error:")]
        assert code == 2 and len(lines) == 1 and needle in lines[0], err[-2000:]
        assert not (tmp_path / "never").exists()

    # a second model that does not load (a damaged weights file): the first model's figures stay in eval.json
    damaged = tmp_path / "damaged"
    shutil.copytree(trained["full"], damaged)
    for weights in damaged.rglob("*.safetensors"):
        weights.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    code, _, err = run_cli(["eval", "--conf", str(conf), "--limit", "2", "--k", "1", "--out", str(tmp_path / "dmg"),
                            "--model", f"label=warm,path={trained['full']}", "--model", f"label=dmg,path={damaged}"],
                           capsys)
    lines = [line for line in err.splitlines() if line.startswith("astuner: error:")]
    assert code == 2 and len(lines) == 1 and "--model dmg: cannot load a model" in lines[0], err[-2000:]
    assert "eval.json holds the 1 model(s) before it" in lines[0]
    partial = json.loads((tmp_path / "dmg" / "eval.json").read_text())
    assert [m["label"] for m in partial["models"]] == ["warm"] and "dmg could not be evaluated" in partial["incomplete"]

    # an endpoint that goes away during its evaluation: its episodes' connection errors are not the model's
    # failures (no score for it), and the model before it keeps its figures
    monkeypatch.setenv("EVAL_TEST_KEY", KEY)
    code, _, err = run_cli(["eval", "--conf", str(conf), "--limit", "2", "--k", "2", "--out", str(tmp_path / "gone"),
                            "--model", f"label=warm,path={trained['full']}", "--model",
                            f"base_url={endpoint.base_url},model=gone,api_key_env=EVAL_TEST_KEY"], capsys)
    lines = [line for line in err.splitlines() if line.startswith("astuner: error:")]
    assert code == 2 and len(lines) == 1, err[-2000:]
    assert re.search(r"--model gone: \d+ of its calls could not reach the model \(not scored", lines[0]), \
        lines[0]
    partial = json.loads((tmp_path / "gone" / "eval.json").read_text())
    assert [m["label"] for m in partial["models"]] == ["warm"] and "gone" in partial["incomplete"]
