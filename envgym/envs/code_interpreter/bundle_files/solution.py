"""Gold solutions: run the task's reference program with the python tool and submit what it
printed (reference programs print the answer and nothing else)."""


def solve_with_code(tools, task):
    output = tools.python(code=task["metadata"]["reference_code"])
    tools.submit_answer(answer=output.strip())
