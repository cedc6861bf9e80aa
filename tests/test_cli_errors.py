"""Every user mistake: exit code 2, a one-line cause naming key / file:line / suggestion, nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Optional

import pytest

from tests.conftest import REPO_ROOT, SEED_YAML, run_cli

YAML = "math_agent/math_agent.yaml"


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


def replace(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)
    return edit


def both(*edits: Callable[[str], str]) -> Callable[[str], str]:
    def edit(text: str) -> str:
        for one in edits:
            text = one(text)
        return text
    return edit


def dataset_file(path: str) -> Callable[[str], str]:
    return replace("type: huggingface_dat_repo ", f"type: dataset_file\n    dataset_file: {{training: {{file_path: {path}}}}}\n   ")


def hf_local(path: str, split: str = "train") -> Callable[[str], str]:
    return replace("{dataset_path: 'gsm8k/main', training_split: train, validation_split: test}",
                   f"{{dataset_path: {path}, training_split: {split}, validation_split: null}}")


def model(path: str) -> Callable[[str], str]:
    return both(dataset_file("data/ok.jsonl"), replace("model: {path: Qwen/Qwen2.5-14B-Instruct}", f"model: {{path: {path}}}"))


EXTRA_FILES = {
    "workflows/broken.py": "x = 1\n\ndef broken(:\n    pass\n",
    "data/ok.jsonl": '{"question": "1 + 1?", "answer": "2"}\n',
    "data/empty.jsonl": "\n",
    "data/malformed.jsonl": '{"question": "q1", "answer": "1"}\n{"question": "q2"\n',
    "data/noquery.jsonl": '{"main_query": 5, "answer": "1"}\n',
    "data/dup.jsonl": '{"question": "a", "task_id": "t1"}\n{"question": "b", "task_id": "t1"}\n',
    "data/latin1.jsonl": b'{"question": "caf\xe9"}\n',
    "data/a_folder/x.jsonl": '{"question": "q"}\n',
    "hf_empty/train.jsonl": "",
    "hf_empty/test.jsonl": '{"question": "q"}\n',
    "data/table.parquet": "junk",
    "hf_corrupt/train.parquet": "junk",
    "hf_nodata/README.txt": "notes",
    "hf_splits/train.jsonl": '{"question": "q"}\n',
    "models/no_config/tokenizer.json": "{}",
    "models/no_type/config.json": '{"hidden_size": 8}',
    "models/no_tokenizer/config.json": '{"model_type": "qwen2"}',
    "models/no_tokenizer/model.safetensors": "junk",
    "models/bad_json/config.json": "{not json",
    "models/a_file.bin": "junk",
    "a_file": "not a folder",
    "workflows/sync_wf.py": ("from astuner import Workflow\n\nclass SyncWorkflow(Workflow):\n"
                             "    def execute(self, workflow_task, model_tuner):\n        return None\n"),
}

# (id, edit of the seed YAML, extra argv, fragments the message must contain)
CASES: list[tuple[str, Optional[Callable[[str], str]], list[str], list[str]]] = [
    ("missing-conf-file", None, ["--conf", "nope.yaml"], ["nope.yaml does not exist"]),
    ("conf-is-a-folder", None, ["--conf", "math_agent"], ["is a folder"]),
    ("yaml-syntax", replace("  data: {train_batch_size: 264,", "  data: {train_batch_size: 264,,]"), [],
     ["math_agent.yaml:7", "YAML syntax error"]),
    ("yaml-root-list", lambda t: "- a\n- b\n", [], ["must hold a mapping"]),
    # issue 29: was "Cannot merge DictConfig with ListConfig", naming neither the key nor the line
    ("yaml-astuner-is-a-list", lambda t: "astuner: [1, 2]\n", [],
     ["math_agent.yaml:1: astuner must be a section", "not a list ([1, 2])"]),
    ("yaml-section-is-a-list", replace("  rollout:\n    agentscope_workflow", "  rollout: [1, 2]\n  rollout_:\n    x"),
     [], ["math_agent.yaml:", "astuner.rollout must be a section", "not a list ([1, 2])"]),
    # was "astuner.model.path is not set; ..." for a file whose only key is misspelt
    ("yaml-top-level-misspelt", lambda t: t.replace("astuner:\n", "astunr:\n", 1), [],
     ["no astuner: section", "astunr (did you mean astuner?)"]),
    ("unknown-key-typo", replace("    num_repeat: 4", "    num_repeats: 4"), [],
     ["math_agent.yaml:13", "unknown key 'astuner.rollout.num_repeats'", "did you mean 'astuner.rollout.num_repeat'"]),
    ("key-in-wrong-section", replace("max_response_length: 10000}", "max_response_length: 10000, temperature: 1}"),
     [], ["math_agent.yaml:7", "'astuner.data.temperature'", "did you mean 'astuner.rollout.temperature'"]),
    ("unknown-section", replace("  task_judge:", "  task_judges:"), [],
     ["math_agent.yaml:21", "unknown key 'astuner.task_judges'", "did you mean 'astuner.task_judge'"]),
    ("wrong-type-int", replace("    num_repeat: 4", "    num_repeat: four"), [],
     ["math_agent.yaml:13", "astuner.rollout.num_repeat must be an integer, got 'four'"]),
    ("wrong-type-float", replace("    temperature: 0.7", "    temperature: hot"), [],
     ["math_agent.yaml:11", "astuner.rollout.temperature must be a number"]),
    ("wrong-type-list", replace('["nonsense", "wrong_toolcall"]', "nonsense"), [],
     ["math_agent.yaml:18", "compute_madness_checklist must be a list of strings"]),
    ("unknown-madness-check", replace('"wrong_toolcall"]', '"gibberish"]'), [],
     ["math_agent.yaml:18", "unknown madness check 'gibberish'", "known checks: nonsense, wrong_toolcall"]),
    ("unknown-tool-call-parser", replace("    temperature: 0.7", "    temperature: 0.7\n    tool_call_parser: qwen3coder"),
     [], ["math_agent.yaml:12", "astuner.rollout.tool_call_parser 'qwen3coder' is not valid",
          "did you mean 'qwen3_coder'"]),
    ("lengths-exceed-model-len", replace("max_response_length: 10000}", "max_response_length: 12000}"), [],
     ["math_agent.yaml:7", "exceeds astuner.rollout.max_model_len (13000)", "at least 15000"]),
    ("non-positive-batch", replace("train_batch_size: 264", "train_batch_size: 0"), [],
     ["astuner.data.train_batch_size must be positive, got 0"]),
    ("top-p-out-of-range", replace("    temperature: 0.7", "    temperature: 0.7\n    top_p: 1.5"), [],
     ["math_agent.yaml:12", "astuner.rollout.top_p must be in (0, 1]"]),
    ("unknown-reader-type", replace("type: huggingface_dat_repo ", "type: hugginface_dat_repo "), [],
     ["is not a task reader", "did you mean 'huggingface_dat_repo'"]),
    ("missing-dataset-path", replace("dataset_path: 'gsm8k/main'", "dataset_path: null"), [],
     ["dataset_path is not set"]),
    ("missing-model-path", replace("model: {path: Qwen/Qwen2.5-14B-Instruct}", "model: {path: null}"), [],
     ["math_agent.yaml:8", "astuner.model.path is not set"]),
    ("dataset-file-missing", replace("type: huggingface_dat_repo ",
                                     "type: dataset_file\n    dataset_file: {training: {file_path: nope.jsonl}}\n   "),
     [], ["dataset_file.training.file_path", "'nope.jsonl' does not exist"]),
    ("bad-experiment-name", replace("  project_name: math_agent", "  project_name: math_agent\n  experiment_name: a/b"),
     [], ["math_agent.yaml:4", "is not a folder name"]),
    ("plugin-no-arrow", replace("math_agent.math_agent->MathAgentWorkflow", "math_agent.math_agent.MathAgentWorkflow"),
     [], ["astuner.rollout.agentscope_workflow", "has no '->'"]),
    ("plugin-module-missing", replace("math_agent.math_agent->", "math_agnt.math_agent->"), [],
     ["astuner.rollout.agentscope_workflow", "module 'math_agnt'", "was not found"]),
    ("plugin-name-missing", replace("->MathAgentWorkflow", "->MathAgentWorkflo"), [],
     ["'MathAgentWorkflo' is not defined", "did you mean 'MathAgentWorkflow'", "it defines: MathAgentWorkflow"]),
    ("plugin-file-missing", replace("math_agent.math_agent->MathAgentWorkflow", "workflows/nope.py->Wf"), [],
     ["file 'workflows/nope.py'", "does not exist"]),
    ("plugin-import-error", replace("math_agent.math_agent->MathAgentWorkflow", "workflows/broken.py->broken"), [],
     ["importing", "workflows/broken.py:3: SyntaxError"]),
    ("workflow-wrong-kind", replace("math_agent.math_agent->MathAgentWorkflow",
                                    "astuner.task_judge.math_answer_as_judge->MathAnswerAsJudge"), [],
     ["astuner.rollout.agentscope_workflow", "names class MathAnswerAsJudge", "must be a Workflow subclass"]),
    ("workflow-not-async", replace("math_agent.math_agent->MathAgentWorkflow", "workflows/sync_wf.py->SyncWorkflow"),
     [], ["SyncWorkflow.execute is not 'async def'"]),
    ("judge-wrong-kind", replace("astuner.task_judge.math_answer_as_judge->MathAnswerAsJudge",
                                 "math_agent.math_agent->MathAgentWorkflow"), [],
     ["astuner.task_judge.judge_protocol", "must be a BaseJudge subclass"]),
    ("override-bad-syntax", None, ["astuner.rollout.num_repeat=[1,"], ["command-line override", "is not valid"]),
    ("override-unknown-key", None, ["astuner.rollout.num_repeats=8"],
     ["command-line override 'astuner.rollout.num_repeats=8'", "unknown key 'astuner.rollout.num_repeats'",
      "did you mean 'astuner.rollout.num_repeat'"]),
    ("override-unknown-key-nothing-near", None, ["astuner.rollout.qwertyuiop=8"],
     ["unknown key 'astuner.rollout.qwertyuiop'", "--dry-run prints every key"]),
    ("override-added-unknown-key", None, ["+astuner.rollout.num_repeats=8"],
     ["command-line override '+astuner.rollout.num_repeats=8'", "did you mean 'astuner.rollout.num_repeat'"]),
    ("override-wrong-type", None, ["astuner.rollout.num_repeat=abc"],
     ["command-line override 'astuner.rollout.num_repeat=abc'", "must be an integer"]),
    ("defaults-entry-missing", replace("  - verl_default\n", "  - verl_defaults\n"), [],
     ["defaults entry", "verl_defaults", "was not found"]),
    ("searchpath-not-a-folder", replace("    - file://astuner/default_config/verl", "    - file://nowhere/verl"), [],
     ["math_agent.yaml:33", "'file://nowhere/verl' is not a folder"]),
    ("bad-interpolation", replace("project_name: math_agent", "project_name: ${no.such.key}"), [],
     ["cannot resolve", "astuner.project_name"]),
    ("unknown-backbone", None, ["--backbone", "torchrun"], ["invalid choice: 'torchrun'", "(see astuner --help)"]),
    ("unknown-option", None, ["--dryrun"], ["unrecognized arguments: --dryrun", "(see astuner --help)"]),
    ("backbone-extra-missing", None, ["--backbone", "verl"], ["backbone verl needs verl: pip install 'astuner[verl]'"]),
    ("trinity-extra-missing", None, ["--backbone", "trinity"],
     ["backbone trinity needs Trinity-RFT: pip install 'astuner[trinity]'"]),
    ("yaml-root-string", lambda t: "just a string\n", [], ["must hold a mapping", "not a str"]),
    ("yaml-empty", lambda t: "# nothing yet\n", [], ["must hold a mapping", "not nothing"]),
    ("plugin-cut-by-shell-redirect", None, ["astuner.rollout.agentscope_workflow=math_agent.math_agent-"],
     ["ends at '-'", "redirect", "quote the override"]),
    ("plugin-quoted-but-unknown", None, ["astuner.rollout.agentscope_workflow=math_agent.math_agent->Nope"],
     ["'Nope' is not defined"]),
    ("exp-dir-is-a-file", None, ["--exp-dir", "a_file"], ["--exp-dir a_file is a file"]),
    ("exp-dir-under-a-file", None, ["--exp-dir", "a_file/runs"], ["a_file is a file"]),
    # issue 29: a traceback (exit 1) at launch, "config OK" at --dry-run
    ("exp-dir-under-proc", None, ["--exp-dir", "/proc/astuner-runs"], ["no run folder can be made in /proc"]),
    ("traces-pg-min-reward", None, ["astuner.trainer_common.traces.mode=pg",
                                    "astuner.trainer_common.traces.min_reward=1.0"],
     ["'astuner.trainer_common.traces.min_reward=1.0': chooses the episodes sft trains on", "use traces.mode sft"]),
    ("traces-pg-best-per-task", None, ["astuner.trainer_common.traces.mode=pg",
                                       "astuner.trainer_common.traces.best_per_task=true"],
     ["'astuner.trainer_common.traces.best_per_task=true': chooses the episodes sft trains on"]),
    ("sft-steps-without-expert", None, ["astuner.trainer_common.sft.steps=100"],
     ["astuner.trainer_common.sft.steps > 0 needs an expert"]),
    ("sft-expert-not-async", None, ["astuner.trainer_common.sft.steps=100",
                                    "astuner.trainer_common.sft.expert=workflows/sync_wf.py->SyncWorkflow"],
     ["astuner.trainer_common.sft.expert", "must be an async function (prompt: str) -> str"]),
    # issue 38: the whole PolicyConfig of every policy (978 characters)
    ("policy-name-with-slash", None, ["+astuner.policies={a/b: {trainable: false}}"],
     ["astuner.policies: 'a/b' is not a folder name", "policies/<name>/"]),
    # issue 38: a second line for the default reader's dataset_path, which the misspelt type does not read
    ("unknown-reader-type-of-a-file-reader",
     both(dataset_file("data/ok.jsonl"), replace("dataset_path: 'gsm8k/main'", "dataset_path: null")),
     ["astuner.task_reader.type=dataset_fil"],
     ["'dataset_fil' is not a task reader", "did you mean 'dataset_file'"]),
    # issue 38: 346 characters
    ("two-engines-on-one-gpu", None, ["--dry-run", "--backbone", "trinity", "astuner.trainer_common.device=cuda",
                                      "astuner.trainer_common.n_gpus_per_node=1"],
     ["trinity_only__n_vllm_engine is 2 but there is one GPU", "set it to 1, or use 3 GPUs or more"]),
]

# Mistakes in what a run reads (tasks, model, environment service): --dry-run must catch them too.
PREFLIGHT_CASES: list[tuple[str, Optional[Callable[[str], str]], list[str], list[str]]] = [
    ("data-empty", dataset_file("data/empty.jsonl"), [], ["empty.jsonl: the file holds no tasks"]),
    ("data-malformed-row", dataset_file("data/malformed.jsonl"), [], ["malformed.jsonl:2: invalid JSON"]),
    ("data-main-query-not-text", dataset_file("data/noquery.jsonl"), [],
     ["noquery.jsonl:1", "'main_query' must be a string, got int 5"]),
    ("data-duplicate-ids", dataset_file("data/dup.jsonl"), [], ["task id 't1' appears twice"]),
    ("data-not-utf8", dataset_file("data/latin1.jsonl"), [], ["latin1.jsonl: not UTF-8"]),
    ("data-file-is-a-folder", dataset_file("data/a_folder"), [], ["a_folder (train) is a folder"]),
    ("data-file-is-parquet", dataset_file("data/table.parquet"), [], ["table.parquet (train) is not JSON lines"]),
    ("hf-local-corrupt-parquet", hf_local("hf_corrupt"), [], ["hf_corrupt cannot be", "Parquet"]),
    # issue 29: "config OK ... not checked offline" at --dry-run, then exit 2 at launch
    ("hf-local-missing-relative", hf_local("./data/x"), [],
     ["dataset_path: './data/x' is no file or folder (tried data/x", "cannot be a hub id"]),
    ("hf-local-missing-absolute", hf_local("/opt/data/x"), [],
     ["dataset_path: '/opt/data/x' is no file or folder (tried /opt/data/x)"]),
    ("hf-local-no-data-files", hf_local("hf_nodata"), [], ["hf_nodata holds no data files"]),
    ("hf-local-missing-split", hf_local("hf_splits", "trian"), [], ["has no split 'trian'"]),  # ('training' finds train.jsonl)
    ("model-absolute-path-missing", model("/opt/models/none"), [], ["no model folder '/opt/models/none'"]),
    ("model-folder-without-config", model("models/no_config"), [], ["no_config is not a model folder (no config.json)"]),
    ("model-config-without-type", model("models/no_type"), [], ["names no model_type"]),
    ("model-config-bad-json", model("models/bad_json"), [], ["config.json is not valid JSON"]),
    ("model-without-tokenizer", model("models/no_tokenizer"), [], ["no_tokenizer has no tokenizer files"]),
    ("model-path-is-a-file", model("models/a_file.bin"), [], ["a_file.bin is a file"]),
    ("env-service-refused", replace("type: huggingface_dat_repo ",
                                    "type: env_service\n    env_service: {env_url: 'http://127.0.0.1:9', env_type: x}\n   "),
     [], ["http://127.0.0.1:9", "start the service"]),
    # issue 38: "StopIteration:" naming the folder
    ("hf-local-folder-with-an-empty-file", hf_local("hf_empty"), [],
     ["hf_empty/train.jsonl: the file holds no rows", "remove it from the folder"]),
]


def _write_extra_files(root: Path) -> None:
    for rel, content in EXTRA_FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (root / rel).write_bytes(content)
        else:
            (root / rel).write_text(content)


def _assert_one_line_user_error(code: int, out: str, err: str, fragments: list[str], case_id: str = "") -> str:
    assert code == 2, (code, err)
    message = err.strip()
    assert len(message.splitlines()) == 1, err
    assert message.startswith("astuner: error: "), message
    assert len(message) <= 300, f"{len(message)} characters: {message}"
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert out == ""
    return message


@pytest.mark.parametrize("case_id,edit,argv,fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line_cause(seed, capsys, case_id, edit, argv, fragments):
    _write_extra_files(seed.root)
    before = sorted(p.relative_to(seed.root) for p in seed.root.rglob("*") if "__pycache__" not in p.parts)
    if edit is not None:
        seed.yaml_path.write_text(edit(SEED_YAML))
    full = (["--conf", YAML] if "--conf" not in argv else []) + argv
    code, out, err = run_cli(full, capsys)
    _assert_one_line_user_error(code, out, err, fragments, case_id)
    after = sorted(p.relative_to(seed.root) for p in seed.root.rglob("*") if "__pycache__" not in p.parts)
    assert after == before  # nothing written: no run folder, no stray file


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
@pytest.mark.parametrize("case_id,edit,argv,fragments", PREFLIGHT_CASES, ids=[c[0] for c in PREFLIGHT_CASES])
def test_bad_run_input_exits_2_before_anything_is_written(seed, capsys, case_id, edit, argv, fragments, dry_run):
    _write_extra_files(seed.root)
    before = sorted(p.relative_to(seed.root) for p in seed.root.rglob("*") if "__pycache__" not in p.parts)
    seed.yaml_path.write_text(edit(SEED_YAML))
    code, out, err = run_cli(["--conf", YAML, *(["--dry-run"] if dry_run else []), *argv], capsys)
    _assert_one_line_user_error(code, out, err, fragments)
    after = sorted(p.relative_to(seed.root) for p in seed.root.rglob("*") if "__pycache__" not in p.parts)
    assert after == before


@pytest.mark.parametrize("override, message", [
    ("astuner.model.lora.rank=8",
     "astuner.model.lora is null by default: set its keys with +astuner.model.lora.rank=8"),
    ("astuner.rollout.workflow_args.level=3", "astuner.rollout.workflow_args is a free-form mapping, empty by default: "
                                              "add to it with +astuner.rollout.workflow_args.level=3")])
def test_a_key_that_can_be_added_is_told_to_add_it_with_plus(seed, capsys, override, message):
    code, _, err = run_cli(["--conf", YAML, override, "--dry-run"], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    code, _, err = run_cli(["--conf", YAML, f"+{override}", "--dry-run"], capsys)  # the advice, followed, passes
    assert code == 0, err


def test_a_section_the_file_sets_is_replaced_with_plus(capsys, tmp_path):
    """The file sets model.tiny, which is null by default: replacing it whole takes '+' (before: "unknown key
    'astuner.model.tiny'; did you mean 'astuner.model.tiny'?")."""
    conf = str(REPO_ROOT / "tutorial" / "example_multi_agent_cpu" / "signal_game.yaml")
    tiny = "astuner.model.tiny={seed:0,hidden_size:64,layers:2,heads:2,tokenizer:words}"
    own = ["--dry-run", "--exp-dir", str(tmp_path), f"astuner.model.path={tmp_path / 'model'}"]
    code, _, err = run_cli(["--conf", conf, tiny, *own], capsys)
    assert code == 2 and f"astuner.model.tiny is null by default: set it with +{tiny}" in err, err
    code, _, err = run_cli(["--conf", conf, f"+{tiny}", *own], capsys)  # the advice, followed, passes
    assert code == 0, err


@pytest.mark.parametrize("override", ["astuner.rollout.num_repeats=8", "astuner.rollout.qwertyuiop=8"])
def test_a_misspelt_override_is_not_told_to_append_a_key_astuner_would_refuse(seed, capsys, override):
    code, _, err = run_cli(["--conf", YAML, override, "--dry-run"], capsys)
    assert code == 2 and "+astuner" not in err and "To append" not in err, err


def test_at_least_forty_cases():
    assert len(CASES) + len(PREFLIGHT_CASES) >= 40


def test_several_problems_are_all_reported(seed, capsys):
    seed.yaml_path.write_text(SEED_YAML.replace("    num_repeat: 4", "    num_repeats: 4")
                              .replace("    temperature: 0.7", "    temperature: hot"))
    code, _, err = run_cli(["--conf", YAML], capsys)
    assert code == 2
    assert "num_repeats" in err and "temperature must be a number" in err


def _files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_every_problem_is_said_one_per_line_the_taken_run_folder_among_them(seed, capsys, monkeypatch, dry_run):
    """A run folder that holds a run hides none of the other problems (issue 38): the config's validation, a
    plug-in, the run folder, a tracker, the task rows and the model folder each say theirs on a line of their
    own, in that order; exit 2, nothing written, by --dry-run and by the run alike."""
    import importlib.util

    _write_extra_files(seed.root)
    (seed.root / "launcher_record" / "math_agent").mkdir(parents=True)
    (seed.root / "launcher_record" / "math_agent" / "config.yaml").write_text("astuner: {}\n")
    seed.yaml_path.write_text(dataset_file("data/empty.jsonl")(SEED_YAML))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    before = _files(seed.root)
    code, out, err = run_cli(["--conf", YAML, *(["--dry-run"] if dry_run else []), "astuner.rollout.temperature=-1",
                              "astuner.task_judge.judge_protocol=math_agent.math_agent->Nope",
                              "astuner.trainer_common.logger=[console,mlflow]", "astuner.model.path=models/no_type"],
                             capsys)
    expected = ["astuner.rollout.temperature must be >= 0", "'Nope' is not defined",
                "launcher_record/math_agent already holds a run", "includes mlflow, which is not installed",
                "empty.jsonl: the file holds no tasks", "no_type/config.json names no model_type"]
    count, *lines = err.strip().splitlines()
    assert code == 2 and out == "", err
    assert count == f"astuner: error: {len(expected)} problems:" and len(lines) == len(expected), err
    for line, fragment in zip(lines, expected):
        assert line.startswith("astuner: error: ") and fragment in line and len(line) <= 300, (fragment, line)
    assert _files(seed.root) == before


def test_a_refused_key_is_said_once_not_again_by_the_checks_that_read_it(seed, capsys):
    """The checks that follow the validation skip what reads a refused key (its value is not the user's): a
    refused experiment_name says nothing of the default's run folder, a refused model.path nothing of a model
    folder; an independent problem is still said."""
    (seed.root / "launcher_record" / "math_agent").mkdir(parents=True)
    (seed.root / "launcher_record" / "math_agent" / "config.yaml").write_text("astuner: {}\n")
    code, _, err = run_cli(["--conf", YAML, "--dry-run", "astuner.experiment_name=a/b", "astuner.model.path=5",
                            "astuner.rollout.agentscope_workflow=math_agent.math_agent->Nope"], capsys)
    count, *lines = err.strip().splitlines()
    assert code == 2 and count == "astuner: error: 3 problems:" and len(lines) == 3, err
    assert "is not a folder name" in lines[0] and "astuner.model.path must be a string" in lines[1], err
    assert "'Nope' is not defined" in lines[2], err


def test_a_failed_first_validation_is_one_line(tmp_path, monkeypatch, capsys):
    """issue 38: the validation before training ended on the first episode's whole error (335-352 characters)."""
    shutil.copytree(REPO_ROOT / "tutorial" / "example_tiny_cpu", tmp_path / "tutorial" / "example_tiny_cpu")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken_agent.py").write_text(
        "from astuner import Workflow\n\n\nclass Broken(Workflow):\n"
        "    async def execute(self, workflow_task, model_tuner):\n"
        "        raise ValueError('the tool server refused the call: ' + 'no such tool; ' * 30)\n")
    code, _, err = run_cli(["--conf", "tutorial/example_tiny_cpu/tiny_cpu.yaml", "--exp-dir", str(tmp_path / "runs"),
                            "astuner.rollout.agentscope_workflow=broken_agent.py->Broken",
                            "astuner.trainer_common.total_training_steps=1"], capsys)
    errors = [line for line in err.splitlines() if line.startswith("astuner: error: ")]
    assert code == 2 and len(errors) == 1, err[-3000:]
    assert len(errors[0]) <= 300, f"{len(errors[0])} characters: {errors[0]}"
    assert "episodes failed" in errors[0] and "first error: ValueError: the tool server refused the call" in errors[0]
    assert errors[0].endswith("... (tracebacks in the log)")
