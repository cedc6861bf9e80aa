"""The README and the manual in docs/: the site builds with `mkdocs build --strict`, every relative link (and its
#anchor) resolves, every YAML block parses and every Python block compiles, the config reference is current, and
what the docs mark as runnable runs — the README's smallest complete example trains a step as written, each
`astuner --conf` command they show passes its dry run, and `<!-- docs: run -->` Python blocks run on a trained
checkpoint at the path they name."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from astuner.config.reference import END, START, render
from tests.conftest import REPO_ROOT, run_cli

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(<!-- docs: (?P<mark>[^>]*?) -->\n)?```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```", re.S | re.M)
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def blocks(page: Path) -> list[tuple[str, str, str]]:
    """(language, marker, body) of each fenced block of `page`."""
    return [(m.group("lang"), (m.group("mark") or "").strip(), m.group("body")) for m in FENCE.finditer(page.read_text())]


def slug(heading: str) -> str:
    """An anchor as mkdocs (Python-Markdown's toc) makes it from a heading."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def test_the_config_reference_is_current():
    text = (REPO_ROOT / "docs" / "configuration.md").read_text()
    start = text.index(START) + len(START)
    assert text[start:text.index(END)] == render(), \
        "regenerate with: python -m astuner.config.reference --write docs/configuration.md"


def test_the_readme_is_a_front_page():
    assert len((REPO_ROOT / "README.md").read_text().splitlines()) <= 250


def test_the_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "using-the-trained-model" / "index.html").is_file()


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_resolves(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    for match in LINK.finditer(text):
        target = match.group(1) or match.group(2)
        if re.match(r"^[a-z]+:", target):  # http(s), mailto
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name}: {target} -> {resolved} does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{page.name}: {target}: no heading #{anchor} in {resolved.name}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_yaml_block_parses_and_every_python_block_compiles(page):
    for lang, _, body in blocks(page):
        if lang == "yaml":
            yaml.safe_load(body)
        elif lang == "python":
            compile(body, f"{page.name} block", "exec")


def _readme_example(root: Path) -> None:
    """The README's `<!-- docs: file NAME -->` blocks written into `root`, with the data they name."""
    files = [(mark.split(" ", 1)[1], body) for _, mark, body in blocks(REPO_ROOT / "README.md")
             if mark.startswith("file ")]
    assert {name for name, _ in files} == {"my_agent.py", "my_agent.yaml"}
    for name, body in files:
        (root / name).write_text(body)
    data = root / "tutorial" / "example_agent_cpu"
    data.mkdir(parents=True)
    for name in ("train.jsonl", "val.jsonl"):
        shutil.copy(REPO_ROOT / "tutorial" / "example_agent_cpu" / name, data / name)


def test_the_readme_example_trains_as_written(tmp_path, tiny_model_dir, monkeypatch, capsys):
    _readme_example(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["--conf", "my_agent.yaml", "--dry-run"], capsys)
    assert code == 0, err  # the hub model is not fetched offline: said, not failed
    assert "model 'Qwen/Qwen2.5-0.5B-Instruct' is a hub id: not checked offline" in err
    code, out, err = run_cli(["--conf", "my_agent.yaml", f"astuner.model.path={tiny_model_dir}",
                            "astuner.trainer_common.total_training_steps=1", "astuner.data.train_batch_size=2",
                            "astuner.rollout.num_repeat=2", "astuner.trainer_common.test_freq=-1"], capsys)
    assert code == 0, err[-3000:]
    assert (tmp_path / "launcher_record" / "my_agent" / "checkpoints" / "global_step_1" / "COMPLETE").exists()
    # the agent prints each message unless told not to (the README's agent is not): the run keeps them off the console
    assert "sensor_agent:" not in out and "sensor_agent:" not in err, out[-2000:]


def _astuner_commands(page: Path) -> list[tuple[list[str], tuple[str, ...]]]:
    """Each `astuner --conf` command of the page's shell blocks, with the scripts the block runs before it (e.g. the
    warm start that creates the model the command's config names)."""
    out = []
    for lang, _, body in blocks(page):
        if lang not in ("bash", "sh", "shell"):
            continue
        setup: list[str] = []
        for line in body.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words and words[0].endswith("astuner") and words[1:2] == ["--conf"]:
                    out.append((words[1:], tuple(setup)))
                elif words and words[0].endswith("python") and words[1:2] != ["-m"] and words[1:2]:
                    setup.append(words[1])
    return out


COMMANDS = [(page, argv, setup) for page in PAGES for argv, setup in _astuner_commands(page)]
_SETUP_DONE: dict[tuple[str, ...], Path] = {}


def _run_setup(scripts: tuple[str, ...], tmp_path_factory) -> Path:
    """The scripts a block runs before its command, run once as written, in a folder of their own (what they write
    lands there, as in a user's checkout)."""
    if scripts not in _SETUP_DONE:
        folder = tmp_path_factory.mktemp("docs_setup")
        for script in scripts:
            assert (REPO_ROOT / script).is_file(), f"{script} does not exist"
            proc = subprocess.run([sys.executable, str(REPO_ROOT / script)], cwd=folder, capture_output=True,
                                  text=True, timeout=900)
            assert proc.returncode == 0, f"{script}: {proc.stderr[-2000:]}"
        _SETUP_DONE[scripts] = folder
    return _SETUP_DONE[scripts]


@pytest.mark.parametrize("page, argv, setup", COMMANDS,
                         ids=[f"{p.name}:{' '.join(a)[:60]}" for p, a, _ in COMMANDS])
def test_each_astuner_command_shown_passes_its_dry_run(page, argv, setup, tmp_path, tmp_path_factory, monkeypatch,
                                                       capsys):
    argv = [a for a in argv if a != "--with-ray"]
    if argv[1] == "my_agent.yaml":  # the README's example, written out
        _readme_example(tmp_path)
        monkeypatch.chdir(tmp_path)
    else:
        assert (REPO_ROOT / argv[1]).is_file(), f"{page.name}: {argv[1]} does not exist"
        # not the checkout: the tiny models the tutorials create (launcher_record/.models/) are the user's there;
        # the tutorials' own files are found from the config's folder
        monkeypatch.chdir(_run_setup(setup, tmp_path_factory) if setup else tmp_path)
        argv = [argv[0], str(REPO_ROOT / argv[1]), *argv[2:]]
    code, _, err = run_cli([*argv, "--exp-dir", str(tmp_path / "runs"),
                            *(["--dry-run"] if "--dry-run" not in argv else [])], capsys)
    assert code == 0, f"{page.name}: astuner {' '.join(argv)}: {err[-2000:]}"


def test_runnable_python_blocks_run_on_a_trained_checkpoint(tmp_path, tiny_model_dir):
    runnable = [(page, body) for page in PAGES for lang, mark, body in blocks(page)
                if lang == "python" and mark == "run"]
    assert runnable
    for page, body in runnable:
        for folder in set(re.findall(r"\"(launcher_record/[^\"]+/model)\"", body)):
            (tmp_path / folder).parent.mkdir(parents=True, exist_ok=True)
            if not (tmp_path / folder).exists():
                shutil.copytree(tiny_model_dir, tmp_path / folder)
        proc = subprocess.run([sys.executable, "-c", body], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert proc.returncode == 0, f"{page.name}: {proc.stderr[-2000:]}"


def _chat_commands(page: Path) -> list[str]:
    """Each shell line of `page` that runs `astuner chat` (continuation lines joined)."""
    return [line.strip() for lang, _, body in blocks(page) if lang in ("bash", "sh", "shell")
            for line in body.replace("\\\n", " ").splitlines() if re.search(r"astuner chat ", line)]


CHATS = [(page, line) for page in PAGES for line in _chat_commands(page)]


@pytest.mark.parametrize("page, line", CHATS, ids=[f"{p.name}:{i}" for i, (p, _) in enumerate(CHATS)])
def test_each_astuner_chat_command_shown_runs_as_written(page, line, tiny_model_dir, tmp_path):
    """Run by bash as written (its stdin, its quoting), from a folder holding the repository's tutorial/ and a
    tiny model at the checkpoint path the line names."""
    checkpoint = re.search(r"astuner chat\s+(\S+)", line).group(1)
    assert "global_step_" in checkpoint, line
    if checkpoint.startswith("launcher_record/my_run"):  # a placeholder run name (the CLI's help)
        pytest.skip("placeholder")
    shutil.copytree(tiny_model_dir, tmp_path / checkpoint / "model")
    (tmp_path / "tutorial").symlink_to(REPO_ROOT / "tutorial")
    command = re.sub(r"(\S*/)?astuner chat ", f"{shlex.quote(sys.executable)} -m astuner chat --max-new-tokens 8 ",
                     line)
    proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, f"{page.name}: {line}: {proc.stderr[-2000:]}"


def test_the_sensor_agents_tools_file_is_the_schema_its_agent_offers():
    """`astuner chat --tools tutorial/example_agent_cpu/tools.json` renders what training rendered."""
    import json

    sys.path.insert(0, str(REPO_ROOT / "tutorial" / "example_agent_cpu"))
    try:
        from sensor_agent import sensor_toolkit
    finally:
        sys.path.pop(0)
    shipped = json.loads((REPO_ROOT / "tutorial" / "example_agent_cpu" / "tools.json").read_text())
    assert shipped == sensor_toolkit(497).get_json_schemas()


def test_chat_renders_the_tools_and_answers_a_tool_line(tiny_model_dir, tmp_path, capsys, monkeypatch):
    import io

    from astuner import chat

    seen = []
    real = chat.reply
    monkeypatch.setattr(chat, "reply", lambda model, tok, messages, n, t, tools=None:
                        seen.append(([dict(m) for m in messages], tools)) or real(model, tok, messages, n, t, tools))
    tools = tmp_path / "tools.json"
    shutil.copy(REPO_ROOT / "tutorial" / "example_agent_cpu" / "tools.json", tools)
    monkeypatch.setattr(sys, "stdin", io.StringIO("What does sensor S964 read?\ntool: 497\n\n"))
    code, out, err = run_cli(["chat", str(tiny_model_dir), "--tools", str(tools), "--max-new-tokens", "4"], capsys)
    assert code == 0, err
    assert [m["role"] for m in seen[1][0]] == ["user", "assistant", "tool"] and seen[1][0][2]["content"] == "497"
    assert seen[1][1][0]["function"]["name"] == "read_sensor"
    # the template renders the tool's schema and its result as in training
    from transformers import AutoTokenizer

    text = AutoTokenizer.from_pretrained(str(tiny_model_dir)).apply_chat_template(
        seen[1][0], tools=seen[1][1], add_generation_prompt=True, tokenize=False)
    assert "read_sensor" in text and "<tool_response>\n497\n</tool_response>" in text
    for content, message in (("{", "cannot read it as JSON"), ('[{"type": "function"}]', "entry 0 is no function"),
                             ("[" * 100_000, "cannot read it as JSON"), (None, "no such file")):
        if content is None:
            tools.unlink()
        else:
            tools.write_text(content)
        code, _, err = run_cli(["chat", str(tiny_model_dir), "--tools", str(tools), "--prompt", "hi"], capsys)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    # a conversation the template refuses (here: a template that raises on a tool turn) is one line, exit 2
    model_dir = tmp_path / "strict"
    shutil.copytree(tiny_model_dir, model_dir)
    (model_dir / "chat_template.jinja").write_text(
        "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tool turns') }}{% endif %}"
        "{{ m.content }}{% endfor %}")
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\ntool: 497\n"))
    code, _, err = run_cli(["chat", str(model_dir), "--tools", str(REPO_ROOT / "tutorial" / "example_agent_cpu" /
                                                                   "tools.json"), "--max-new-tokens", "2"], capsys)
    assert code == 2 and "cannot render this conversation" in err and "no tool turns" in err, err
    assert "does not render tools: --tools changes nothing" in err


def test_a_chat_reply_keeps_its_tool_call_markers_and_drops_the_turns_end(tiny_model_dir):
    """The reply goes back into the next turn's prompt: without its <tool_call> markers the trained model sees a
    history unlike training's (and answered `\\boxed{}`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from astuner.chat import reply

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    said = '<tool_call>\n{"name": "read_sensor", "arguments": {}}\n</tool_call>'
    tail = tokenizer(said, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert tokenizer.convert_ids_to_tokens(tail[0]) == "<tool_call>"  # one special token, which decoding would skip
    model.generate = lambda input_ids, **kw: torch.cat([input_ids, torch.tensor([tail])], dim=1)
    assert reply(model, tokenizer, [{"role": "user", "content": "hi"}], 8, 0.0) == said


def test_astuner_chat_answers_from_a_checkpoint(tiny_model_dir, tmp_path, capsys):
    step = tmp_path / "global_step_3"
    shutil.copytree(tiny_model_dir, step / "model")
    code, out, err = run_cli(["chat", str(step), "--prompt", "What does sensor S964 read?", "--max-new-tokens", "4"],
                             capsys)
    assert code == 0, err
    code, out, err = run_cli(["chat", str(tmp_path / "nope")], capsys)
    assert code == 2 and err.startswith("astuner: error:") and len(err.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(["chat", str(tmp_path / "empty")], capsys)
    assert code == 2 and "holds no model" in err


def test_astuner_help_lists_every_subcommand_with_a_line_each(capsys):
    """`astuner --help` names each subcommand (read from the CLI's table of them, so a new one is covered) with its
    description on one line, and its synopsis among the usages; each subcommand's own --help answers."""
    from astuner.cli import _commands

    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0
    usage = out.split("\n\n", 1)[0]
    for name, (build, _) in _commands().items():
        assert re.search(rf"^  astuner {re.escape(name)} +{re.escape(build().description)}$", out, re.M), name
        assert re.search(rf"^       astuner {re.escape(name)} ", usage, re.M), name
        assert run_cli([name, "--help"], capsys)[0] == 0
    assert re.search(r"^  astuner --conf PATH +\S", out, re.M)


def test_the_synopsis_in_configuration_md_is_the_usage_astuner_help_prints(capsys):
    code, out, _ = run_cli(["--help"], capsys)
    usage = out.split("\n\n", 1)[0].splitlines()
    assert code == 0 and usage[0].startswith("usage: ")
    printed = [line[len("usage: "):] for line in usage]
    page = (REPO_ROOT / "docs" / "configuration.md").read_text()
    shown = page.split("## The command\n\n```\n", 1)[1].split("```\n", 1)[0].splitlines()
    assert shown == printed
