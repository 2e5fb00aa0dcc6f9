"""The report shows what one needs to debug "the model never calls tools": the tool list, the
exact prompt text the model read (decoded from its own token ids), and call ids as written."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from envgym.embedded import load_tokenizer
from envgym.evaluate import EvalConfig, ModelRef, evaluate, offered_tools
from envgym.policy import SamplingParams, Turn, Usage
from envgym.report import write_report
from envgym.store import Store

pytestmark = pytest.mark.timeout(180)

CALL_ID = "Call_AbC9xY"  # mixed case: an upper-cased label would mangle it
WRONG_PLAN = [
    {
        "time": "2025-10-05",
        "city": "Beijing",
        "hotel": "h",
        "afternoon_restaurant": "r",
        "afternoon_attraction": "a",
        "evening_restaurant": "e",
    }
]


@dataclass
class TemplatePolicy:
    """Renders each prompt with SmolLM2's real chat template and tokenizer (as the local engine
    conditions on token ids) and submits a wrong plan in one tool call: no model runs."""

    tokenizer: Any
    name: str = "template-double"
    version: int = 1
    prompts: dict[str, tuple[str, list[int], list[int]]] = field(default_factory=dict)

    async def act(
        self,
        session: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        params: SamplingParams,
    ) -> Turn:
        text = self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=False
        )
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        arguments = json.dumps({"answer_text": json.dumps(WRONG_PLAN)})
        call = {
            "id": CALL_ID,
            "type": "function",
            "function": {"name": "submit_result", "arguments": arguments},
        }
        sampled = self.tokenizer.encode(
            f'<tool_call>{{"name": "submit_result", "arguments": {arguments}}}</tool_call>',
            add_special_tokens=False,
        )
        self.prompts[session] = (text, ids, sampled)
        return Turn(
            text="",
            message={"role": "assistant", "content": "", "tool_calls": [call]},
            prompt_ids=ids,
            token_ids=sampled,
            logprobs=[-1.0] * len(sampled),
            finish_reason="tool_calls",
            usage=Usage(prompt_tokens=len(ids), completion_tokens=len(sampled)),
        )

    async def end_session(self, session: str) -> None:
        return None

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], TemplatePolicy]:
    tmp = tmp_path_factory.mktemp("eval-report")
    tokenizer = load_tokenizer()
    policy = TemplatePolicy(tokenizer)
    run = evaluate(
        "trip-planning-v0",
        ModelRef("template-double", "test", "template-double:v1"),
        EvalConfig(k=1, limit=2, concurrency=2, sandbox="bwrap"),
        store=Store(f"sqlite:///{tmp / 'r.db'}"),
        policy=policy,
    )
    tools = offered_tools("trip-planning-v0", run)

    def decode(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=False))

    write_report(tmp / "html", run.summary, run.episodes, tools=tools, decode=decode)
    return tmp / "html", json.loads((tmp / "html" / "report.json").read_text()), policy


def test_the_report_lists_the_tools_and_the_exact_prompt(
    report: tuple[Path, dict[str, Any], TemplatePolicy],
) -> None:
    _, data, policy = report
    names = [t["function"]["name"] for t in data["tools"]]
    assert len(names) == 15 and names[0] == "get_all_cities" and "submit_result" in names
    assert data["decoded"] is True and len(data["episodes"]) == 2
    for ep in data["episodes"]:
        text, ids, sampled = policy.prompts[f"{ep['task_id']}#{ep['sample']}"]
        # the exact text of the token ids the model conditioned on, not a re-rendering
        assert ep["prompt_text"] == text and "<|im_start|>system" in ep["prompt_text"]
        task_prompt = next(m["content"] for m in ep["messages"] if m["role"] == "user")
        assert task_prompt in ep["prompt_text"]
        assert ep["model_view"] == [text + "".join(load_tokenizer().decode(sampled))]
        # call ids are kept as the model wrote them
        assert ep["messages"][2]["tool_calls"][0]["id"] == CALL_ID
        assert ep["messages"][3]["tool_call_id"] == CALL_ID


def test_without_a_tokenizer_there_is_no_prompt_text(tmp_path: Path) -> None:
    from envgym.evaluate import summarize
    from envgym.rollout import EpisodeResult

    eps = [EpisodeResult(task_id="t", sample=0)]
    write_report(tmp_path, summarize(eps, k=1), eps)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["tools"] is None and data["decoded"] is False
    assert (data["episodes"][0]["prompt_text"], data["episodes"][0]["model_view"]) == (None, [])


# The page itself: innerText applies CSS text-transform, so a probe appended after the viewer's
# script reads the text as a person sees it (the old `.role` label upper-cased call ids).
PROBE = """<script>
document.body.insertAdjacentHTML("beforeend", "<pre id='probe'></pre>");
const seen = (id) => document.getElementById(id).innerText;
document.getElementById("probe").textContent =
  "PROBE-START" + seen("tools") + "\\n" + seen("trajectories") + "PROBE-END";
</script>
</body>"""


@pytest.mark.heavy
def test_the_page_shows_tools_prompt_and_call_ids_as_written(
    report: tuple[Path, dict[str, Any], TemplatePolicy], tmp_path: Path
) -> None:
    out, data, _ = report
    probe = out / "probe.html"
    probe.write_text((out / "index.html").read_text().replace("</body>", PROBE))
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed: apt-get install -y chromium")
    done = subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'p'}",
            "--dump-dom",
            f"file://{probe}#expand=all",
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = re.search(r'<pre id="probe">PROBE-START(.*)PROBE-END</pre>', done.stdout, re.S)
    assert seen is not None, "the probe did not run"
    text = seen.group(1)
    assert "15 tools, given with every prompt (how they were shown was not recorded)" in text
    for tool in data["tools"]:
        assert tool["function"]["name"] in text
    assert text.count("prompt of the first turn, exactly as the model read it") == 2
    assert text.count(CALL_ID) == 4  # each episode: on its call and on the tool result
    assert CALL_ID.upper() not in text
    assert "TOOL · submit_result · " + CALL_ID in text  # the role label is still upper-cased


def test_the_embedded_models_decoder_gives_back_its_text() -> None:
    from envgym.evaluate import model_decoder, model_ref

    decode = model_decoder(model_ref("smollm2"))
    assert decode is not None
    text = "<|im_start|>user\nCall_AbC9xY<|im_end|>"
    assert decode(load_tokenizer().encode(text, add_special_tokens=False)) == text
    assert model_decoder(model_ref("gold")) is None
