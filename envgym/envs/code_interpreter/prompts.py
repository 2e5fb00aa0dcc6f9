"""System prompts of the seed (DeepSeek-V3.2, Appendix B), selectable per environment.

``plain``: Table 7, the agent system prompt of non-reasoning agentic data.
``thinking``: Table 8, tool calls inside the reasoning (``<think></think>``), at most 20 code
executions.  The seed's ``{TOOL-DESCRIPTIONS}`` / ``{TOOLCALL-FORMAT}`` section is rendered by
the env's tool-call parser when tools are not passed natively (``native_tools=False``); with
native tool calling the chat template renders the tools.  The timeout and the execution cap
are filled in from the env's settings (the seed's values are the defaults).  envgym appends
one sentence saying how to give the answer, which the verifier needs.
"""

from __future__ import annotations

PROMPTS = ("plain", "thinking")

# Table 7, verbatim up to the tools section.
PLAIN = (
    "Use Python interpreter tool to execute Python code. The code will not be shown to the user. "
    "This tool should be used for internal reasoning, but not for code that is intended to be "
    "visible to the user (e.g. when creating plots, tables, or files). When you send a message "
    "containing Python code to python, it will be executed in a stateful Jupyter notebook "
    "environment. python will respond with the output of the execution or time out after "
    "{timeout:.1f} seconds."
)

# Table 8, verbatim up to the tools section.
THINKING = (
    "You are a helpful assistant with access to a Python interpreter.\n"
    "- You may use the Python tool multiple times during your reasoning, a.k.a in <think></think>, "
    "with a maximum of {max_executions} code executions.\n"
    "- Call the Python tool early in your reasoning to aid in solving the task. Continue reasoning "
    "and invoking tools as needed until you reach the final answer. Once you have the answer, stop "
    "reasoning and present your solution using Markdown and LaTeX.\n"
    "- Do NOT invoke any tools in your presented final solution steps.\n"
    "- To improve efficiency and accuracy, you should prefer code execution over language-based "
    "reasoning whenever possible. Keep your reasoning succinct; let the code do the heavy lifting."
)

ANSWER_SUBMIT = "When you have the final answer, call `submit_answer` with only the answer."
ANSWER_FINAL = "Give the final answer at the end of your reply as \\boxed{{answer}}."


def system_prompt(kind: str, *, timeout_s: float, max_executions: int | None, answer: str) -> str:
    """The system prompt for ``kind`` ("plain" | "thinking") and answer mode ("submit" | "final")."""
    if kind not in PROMPTS:
        raise ValueError(f"unknown prompt {kind!r}; choose one of {', '.join(PROMPTS)}")
    if answer not in ("submit", "final"):
        raise ValueError(f"answer must be 'submit' or 'final', not {answer!r}")
    if kind == "plain":
        head = PLAIN.format(timeout=timeout_s)
    else:
        head = THINKING.format(
            max_executions=max_executions if max_executions is not None else "unlimited"
        )
    tail = ANSWER_SUBMIT if answer == "submit" else ANSWER_FINAL.format()
    return f"{head}\n\n{tail}"
