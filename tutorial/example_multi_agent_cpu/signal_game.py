"""The signal game: three agents, three policies. A hinter sees a secret digit and gives a one-digit hint; a
noise agent (a frozen policy) says a digit; a guesser sees the hint and the noise and names the secret.

The code the two learners must find: the hint is the digit after the secret, and the guesser reads the digit
before the hint. Each is rewarded for its own half (a reward per agent), so each learns from its own signal;
the team's success (the guesser names the secret) rises as both do.
"""

from __future__ import annotations

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask


def reply_text(reply) -> str:
    return "".join(block.get("text", "") for block in reply.content if block["type"] == "text").strip()


class SignalGame(Workflow):
    name: str = "signal_game"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        row = workflow_task.task.metadata
        secret = int(row["secret"])
        hinter = model_tuner.register_model("hinter")  # each agent's calls go to its policy (rollout.agent_policy)
        noise = model_tuner.register_model("noise")
        guesser = model_tuner.register_model("guesser")

        hint = reply_text(await hinter([{"role": "user", "content": row["hinter_prompt"].format(secret=secret)}]))
        said = reply_text(await noise([{"role": "user", "content": row["noise_prompt"]}]))
        guess = reply_text(await guesser([{"role": "user", "content": row["guesser_prompt"].format(
            hint=hint, noise=said)}]))

        hinter_right = hint == str((secret + 1) % 10)
        # the guesser is judged on reading the hint it was given: the digit before it
        guesser_right = hint.isdigit() and len(hint) == 1 and guess == str((int(hint) - 1) % 10)
        team = guess == str(secret)
        return WorkflowOutput(reward={"hinter": float(hinter_right), "guesser": float(guesser_right)},
                              is_success=team,
                              metrics={"hinter_right": float(hinter_right), "guesser_right": float(guesser_right),
                                       "team_success": float(team)})
