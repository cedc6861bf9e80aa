"""The viewer in a real browser (headless Chromium from Debian, driven by Selenium through the chromedriver that
ships with it): run curves, a step's table filtered and sorted, an episode opened by its shareable URL with its
trained tokens and their log-probs, and a screenshot. Skipped where no Chromium is installed, except under
ASTUNER_REQUIRE_BROWSER=1 (CI installs it), where that is a failure."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.viewer.conftest import STEPS
from tests.viewer.test_server import trained_step

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
if not (CHROMIUM and DRIVER):
    if os.environ.get("ASTUNER_REQUIRE_BROWSER") == "1":
        raise RuntimeError("ASTUNER_REQUIRE_BROWSER=1 but chromium / chromedriver are not installed "
                           "(apt-get install chromium chromium-driver)")
    pytest.skip("no chromium + chromedriver here (apt-get install chromium chromium-driver)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium (the dev extra)")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def wait(driver, condition, timeout=30):
    return WebDriverWait(driver, timeout).until(condition)


def visible_rows(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#episodes tr.episode")


def test_run_page_step_table_and_episode_tokens(browser, viewer, tiny_run, tmp_path):
    browser.get(viewer.url)
    wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, '[data-curve="reward/mean"] circle')))
    dots = browser.find_elements(By.CSS_SELECTOR, '[data-curve="reward/mean"] circle')
    assert len(dots) == STEPS  # one point per training step
    assert browser.find_elements(By.CSS_SELECTOR, '[data-curve="rollout/truncated_rate"] circle')
    assert len(browser.find_elements(By.CSS_SELECTOR, "#steps a")) == STEPS
    # axes: a reward is drawn on 0..1 with its ticks (a 0.81-0.98 band no longer fills the chart), steps below
    ticks = [t.text for t in browser.find_elements(By.CSS_SELECTOR, '[data-curve="reward/mean"] text.ytick')]
    assert ticks == ["0.00", "0.50", "1.00"], ticks
    steps_shown = [t.text for t in browser.find_elements(By.CSS_SELECTOR, '[data-curve="reward/mean"] text.xtick')]
    assert steps_shown == ["step 1", f"step {STEPS}"], steps_shown

    # click step 5's point: its episode table
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))",
                           browser.find_element(By.CSS_SELECTOR, '[data-curve="reward/mean"] circle[data-step="5"]'))
    wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#episodes tr.episode")))
    assert "step=5" in browser.current_url
    rows = [json.loads(line) for line in (tiny_run / "trajectories" / "step_5.jsonl").read_text().splitlines()]
    assert len(visible_rows(browser)) == len(rows)
    groups = browser.find_elements(By.CSS_SELECTOR, "#episodes tr.group")
    assert len(groups) == len({r["task_id"] for r in rows}) and "mean" in groups[0].text
    assert browser.find_element(By.CSS_SELECTOR, 'th[data-sort="tool_errors"]').text == "tool errors"

    # filter: only episodes with reward < 0.5, then only successful ones
    box = browser.find_element(By.ID, "filter")
    box.send_keys("reward < 0.5")
    low = sum(1 for r in rows if r["reward"] < 0.5)
    wait(browser, lambda d: len(visible_rows(d)) == low)
    assert browser.find_element(By.ID, "count").text.startswith(f"{low} of {len(rows)}")
    box.clear()
    box.send_keys("success")
    wait(browser, lambda d: len(visible_rows(d)) == sum(1 for r in rows if r["is_success"]))
    box.clear()
    box.send_keys(" ")
    wait(browser, lambda d: len(visible_rows(d)) == len(rows))

    # sort by reward, highest first, without the grouping
    browser.find_element(By.ID, "group").click()
    browser.find_element(By.CSS_SELECTOR, 'th[data-sort="reward"]').click()
    cells = [float(r.find_elements(By.TAG_NAME, "td")[2].text) for r in visible_rows(browser)]
    assert cells == sorted(cells, reverse=True)

    # an episode the trainer updated on, opened by its shareable URL
    step, record = trained_step(tiny_run)
    browser.get(f"{viewer.url}?step={step}&episode={record['episode_uuid']}")
    wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, '.tokens .tok[data-loss-mask="1"]')))
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "tool calls that did not parse" in body
    # the task as the reader gave it: its query and expected answer (the records held the task id only)
    row = next(json.loads(line) for line in (tiny_run / "trajectories" / f"step_{step}.jsonl").read_text().splitlines()
               if json.loads(line)["episode_uuid"] == record["episode_uuid"])
    task = next(json.loads(line) for line in (REPO_ROOT / "tutorial" / "example_tiny_cpu" / "train.jsonl").open()
                if json.loads(line)["task_id"] == row["task_id"])
    assert row["query"] == task["question"] and row["expected"] == task["answer"]
    assert "query" in body and task["question"] in body and "expected answer" in body
    sample = browser.find_element(By.CSS_SELECTOR, f'.tokens[data-sample="{record["sample"]}"]')
    tokens = sample.find_elements(By.CSS_SELECTOR, ".tok")
    assert len(tokens) == len(record["input_ids"])
    trained = sample.find_elements(By.CSS_SELECTOR, '.tok[data-loss-mask="1"]')
    assert len(trained) == sum(record["loss_mask"])
    for token in trained:
        i = int(token.get_attribute("data-i"))
        assert float(token.get_attribute("data-logprob")) == pytest.approx(record["rollout_logprobs"][i], abs=1e-4)
        assert float(token.get_attribute("data-trainer-logprob")) == pytest.approx(record["trainer_logprobs"][i],
                                                                                  abs=1e-4)
    context = sample.find_elements(By.CSS_SELECTOR, '.tok[data-loss-mask="0"]')
    assert len(context) == len(record["input_ids"]) - len(trained)
    assert context[0].get_attribute("data-logprob") is None
    # trained and context tokens look different
    assert trained[0].value_of_css_property("background-color") != context[0].value_of_css_property("background-color")
    # tokens whose two log-probs differ by more than the threshold are marked; at 5 none is
    threshold = browser.find_element(By.ID, "threshold")
    threshold.clear()
    threshold.send_keys("5")
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, ".tokens .tok.over"))
    assert "conversation" in browser.find_element(By.TAG_NAME, "main").text

    shots = Path(os.environ.get("ASTUNER_SCREENSHOT_DIR", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    threshold.clear()
    threshold.send_keys("0.1")
    assert browser.save_screenshot(str(shots / "viewer_episode.png"))
    assert (shots / "viewer_episode.png").stat().st_size > 10_000


def test_an_episode_of_several_policies_shows_each_agent_with_its_policy_and_reward(browser, tmp_path, monkeypatch):
    from astuner.cli import main
    from astuner.viewer import start_viewer
    from tests.conftest import REPO_ROOT

    shutil.copytree(REPO_ROOT / "tutorial" / "example_multi_agent_cpu", tmp_path / "tutorial" / "example_multi_agent_cpu")
    monkeypatch.chdir(tmp_path)
    assert main(["--conf", "tutorial/example_multi_agent_cpu/signal_game.yaml", "--exp-dir", "runs",
                 "astuner.trainer_common.total_training_steps=1", "astuner.trainer_common.test_freq=-1",
                 "astuner.trainer_common.val_before_train=false", "astuner.data.train_batch_size=2"]) == 0
    run = tmp_path / "runs" / "signal_game"
    row = json.loads((run / "trajectories" / "step_1.jsonl").read_text().splitlines()[0])
    server = start_viewer(run)
    try:
        browser.get(f"{server.url}?step=1&episode={row['episode_uuid']}")
        wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, ".tokens .tok")))
        text = browser.find_element(By.TAG_NAME, "body").text
    finally:
        server.shutdown()
        server.server_close()
    for agent in ("hinter", "guesser"):
        reward = row["rewards"][agent]  # shown as the page shows numbers: integers bare, else 3 decimals
        shown = str(int(reward)) if float(reward).is_integer() else f"{reward:.3f}"
        assert f"{agent} (policy {agent}, reward {shown})" in text, text
    assert "noise (policy noise)" in text  # the frozen agent: its policy, no reward of its own


def test_the_conversation_of_a_multi_agent_episode_shows_every_agents_turns(browser, multi_agent_run):
    """Was: the last call only (the guesser's prompt and answer); the hinter's and the noise agent's turns were
    nowhere on the page."""
    from astuner.viewer import start_viewer

    row = json.loads((multi_agent_run / "trajectories" / "step_1.jsonl").read_text().splitlines()[0])
    server = start_viewer(multi_agent_run)
    try:
        browser.get(f"{server.url}?step=1&episode={row['episode_uuid']}")
        wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, ".conversation .agent-turns")))
        groups = browser.find_elements(By.CSS_SELECTOR, ".conversation .agent-turns")
        shown = [(g.get_attribute("data-agent"), g.find_element(By.CSS_SELECTOR, "h3.agent").text,
                  [m.text for m in g.find_elements(By.CSS_SELECTOR, ".msg")]) for g in groups]
    finally:
        server.shutdown()
        server.server_close()
    assert [agent for agent, _, _ in shown] == ["hinter", "noise", "guesser"]
    for (agent, label, messages), turn in zip(shown, row["conversations"]):
        assert label == f"agent {agent}"
        assert len(messages) == 2 and turn["messages"][0]["content"] in messages[0]  # its prompt, then its reply
        assert messages[1].lower().startswith(f"assistant · {agent}") and messages[1].endswith(turn["response"].strip())


def test_an_evaluation_folder_shows_its_models_figures_and_each_models_episodes(browser, tiny_run, tmp_path, capsys):
    """`astuner eval`'s folder in the viewer: the table of figures and differences, each model's episodes under its
    label (the episodes table, sortable as a run's)."""
    from astuner.cli import main
    from astuner.viewer import start_viewer

    out = tmp_path / "eval"
    model = tiny_run.parent / "model"
    assert main(["eval", "--conf", str(REPO_ROOT / "tutorial" / "example_tiny_cpu" / "tiny_cpu.yaml"), "--limit", "4",
                 "--k", "2", "--out", str(out), "--model", f"label=first,path={model}",
                 "--model", f"label=second,path={model}"]) == 0
    capsys.readouterr()
    server = start_viewer(out)
    try:
        browser.get(server.url)
        table = wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#eval table")))
        rows = [r.text for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
        assert [r.split()[0] for r in rows] == ["first", "second"], rows
        assert "evaluation: 4 val tasks × 2 episodes" in browser.find_element(By.ID, "eval").text
        assert "second − first: reward" in browser.find_element(By.ID, "eval").text
        links = browser.find_elements(By.CSS_SELECTOR, "#steps a")
        assert [a.text for a in links] == ["first", "second"]
        links[1].click()
        wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#episodes tr.episode")))
        assert browser.find_element(By.TAG_NAME, "h2").text == "second"
        assert len(visible_rows(browser)) == 8
    finally:
        server.shutdown()
        server.server_close()


def test_a_trace_store_shows_its_episodes_and_their_conversations(browser, tmp_path):
    from astuner.records.trace_store import TraceStore
    from astuner.schema.calls import CallRecord
    from astuner.viewer import start_viewer

    store = TraceStore.open_for_writing(tmp_path / "traces.db")
    for episode, reading in (("ticket-1", "497"), ("ticket-2", "512")):
        store.add_call(episode, CallRecord("agent", [{"role": "user", "content": f"What does {episode} read?"}], None,
                                           "p", [1], [2, 3], [-0.1, -0.2], "stop", f"\\boxed{{{reading}}}"))
    store.add_feedback("ticket-2", 1.0)
    store.close()
    server = start_viewer(tmp_path / "traces.db")
    try:
        browser.get(f"{server.url}?step=1")
        wait(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#episodes tr.episode")))
        assert len(visible_rows(browser)) == 2 and browser.find_element(By.TAG_NAME, "h2").text == "step 1"
        browser.get(f"{server.url}?step=1&episode=ticket-2")
        wait(browser, EC.text_to_be_present_in_element((By.TAG_NAME, "body"), "\\boxed{512}"))
        assert "What does ticket-2 read?" in browser.find_element(By.TAG_NAME, "body").text
    finally:
        server.shutdown()
        server.server_close()
