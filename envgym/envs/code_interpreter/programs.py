"""Reference programs for reasoning-gym generators: standard-library Python that solves one
instance from its parameters and prints the answer (and nothing else).

They are what the gold solution runs through the ``python`` tool (so a gold replay exercises
the notebook), and the build checks each one against reasoning-gym's own answer and scorer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Meta = dict[str, Any]


def _basic_arithmetic(m: Meta) -> str:
    return f"""from fractions import Fraction
import re
expr = {m["expression"]!r}
value = eval(re.sub(r"(\\d+)", r"Fraction(\\1)", expr))
print(value.numerator if value.denominator == 1 else value)"""


def _products(m: Meta) -> str:
    return f"print({m['expression']})"


def _count_primes(m: Meta) -> str:
    return f"""lo, hi = {m["start"]}, {m["end"]}
sieve = bytearray([1]) * (hi + 1)
sieve[0:2] = b"\\x00\\x00"[: min(2, hi + 1)]
for p in range(2, int(hi ** 0.5) + 1):
    if sieve[p]:
        sieve[p * p :: p] = bytearray(len(range(p * p, hi + 1, p)))
print(sum(sieve[lo:]))"""


def _gcd(m: Meta) -> str:
    return f"import math\nprint(math.gcd(*{m['numbers']!r}))"


def _lcm(m: Meta) -> str:
    return f"import math\nprint(math.lcm(*{m['numbers']!r}))"


def _fraction(m: Meta) -> str:
    return f"""from fractions import Fraction
f = Fraction({m["numerator"]}, {m["denominator"]})
print(f"{{f.numerator}}/{{f.denominator}}")"""


def _prime_factorization(m: Meta) -> str:
    return f"""n, factors, p = {m["number"]}, [], 2
while p * p <= n:
    while n % p == 0:
        factors.append(p)
        n //= p
    p += 1
if n > 1:
    factors.append(n)
print(" × ".join(map(str, factors)))"""


def _polynomial(m: Meta) -> str:
    # Expand with dict polynomials {exponent tuple: coefficient}: no sympy in the sandbox.
    return f"""import ast
from fractions import Fraction
expr, names = {m["polynomial_expr"]!r}, {sorted(m["variables"])!r}
def const(c):
    return {{(0,) * len(names): Fraction(c)}}
def add(a, b, sign=1):
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + sign * v
    return {{k: v for k, v in out.items() if v}}
def mul(a, b):
    out = {{}}
    for ka, va in a.items():
        for kb, vb in b.items():
            k = tuple(x + y for x, y in zip(ka, kb))
            out[k] = out.get(k, 0) + va * vb
    return {{k: v for k, v in out.items() if v}}
def walk(node):
    if isinstance(node, ast.Constant):
        return const(node.value)
    if isinstance(node, ast.Name):
        return {{tuple(int(n == node.id) for n in names): Fraction(1)}}
    if isinstance(node, ast.UnaryOp):
        return mul(const(-1), walk(node.operand))
    a = walk(node.left)
    if isinstance(node.op, ast.Pow):
        out = const(1)
        for _ in range(node.right.value):
            out = mul(out, a)
        return out
    b = walk(node.right)
    return {{ast.Add: add, ast.Sub: lambda x, y: add(x, y, -1), ast.Mult: mul}}[type(node.op)](a, b)
poly = walk(ast.parse(expr, mode="eval").body)
def term(k, c):
    powers = [n if e == 1 else f"{{n}}**{{e}}" for n, e in zip(names, k) if e]
    return "*".join([str(c)] + powers) if powers else str(c)
print(" + ".join(term(k, c) for k, c in sorted(poly.items(), reverse=True)).replace("+ -", "- ") or "0")"""


def _simple_equations(m: Meta) -> str:
    return f"""from fractions import Fraction
lhs, rhs = {m["equation"]!r}.split("=")
var = {m["variable"]!r}
f = lambda v: eval(f"({{lhs}}) - ({{rhs}})", {{var: v}})
f0, f1 = f(Fraction(0)), f(Fraction(1))
root = -f0 / (f1 - f0)
print(root.numerator if root.denominator == 1 else root)"""


def _bitwise(m: Meta) -> str:
    return f"print(hex({m['problem']}))"


def _power(m: Meta) -> str:
    return f'print(f"{{({m["base"]!r}) ** {m["exponent"]!r}:.6g}}")'


def _game_of_life(m: Meta) -> str:
    return f"""import json
grid, steps = {m["board"]!r}, {m["simulation_steps"]}
rows, cols = len(grid), len(grid[0])
for _ in range(steps):
    grid = [[int(sum(grid[(r + dr) % rows][(c + dc) % cols] for dr in (-1, 0, 1) for dc in (-1, 0, 1)
                     if dr or dc) in ((2, 3) if grid[r][c] else (3,))) for c in range(cols)] for r in range(rows)]
print(json.dumps(grid, separators=(",", ":")))"""


def _bf(m: Meta) -> str:
    return f"""code, tape, ptr, pc, out, jump, stack = {m["bf_program"]!r}, [0] * 30000, 0, 0, [], {{}}, []
for i, ch in enumerate(code):
    if ch == "[":
        stack.append(i)
    elif ch == "]":
        j = stack.pop()
        jump[i], jump[j] = j, i
while pc < len(code):
    ch = code[pc]
    if ch == ">": ptr += 1
    elif ch == "<": ptr -= 1
    elif ch == "+": tape[ptr] = (tape[ptr] + 1) % 256
    elif ch == "-": tape[ptr] = (tape[ptr] - 1) % 256
    elif ch == ".": out.append(chr(tape[ptr]))
    elif ch == "[" and tape[ptr] == 0: pc = jump[pc]
    elif ch == "]" and tape[ptr] != 0: pc = jump[pc]
    pc += 1
print("".join(out))"""


def _mini_sudoku(m: Meta) -> str:
    return f"""grid = {m["puzzle"]!r}
n, box = len(grid), int(len(grid) ** 0.5)
def ok(r, c, v):
    if v in grid[r] or any(grid[i][c] == v for i in range(n)):
        return False
    br, bc = r - r % box, c - c % box
    return all(grid[i][j] != v for i in range(br, br + box) for j in range(bc, bc + box))
def solve():
    for r in range(n):
        for c in range(n):
            if grid[r][c] == 0:
                for v in range(1, n + 1):
                    if ok(r, c, v):
                        grid[r][c] = v
                        if solve():
                            return True
                        grid[r][c] = 0
                return False
    return True
solve()
print("\\n".join(" ".join(map(str, row)) for row in grid))"""


def _largest_island(m: Meta) -> str:
    return f"""grid = {m["grid"]!r}
seen, best = set(), 0
for r0 in range(len(grid)):
    for c0 in range(len(grid[0])):
        if grid[r0][c0] and (r0, c0) not in seen:
            stack, size = [(r0, c0)], 0
            seen.add((r0, c0))
            while stack:
                r, c = stack.pop()
                size += 1
                for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
                    if 0 <= nr < len(grid) and 0 <= nc < len(grid[0]) and grid[nr][nc] and (nr, nc) not in seen:
                        seen.add((nr, nc))
                        stack.append((nr, nc))
            best = max(best, size)
print(best)"""


def _binary_matrix(m: Meta) -> str:
    return f"""from collections import deque
grid = {m["matrix"]!r}
n = len(grid)
dist = [[None] * n for _ in range(n)]
queue = deque((r, c) for r in range(n) for c in range(n) if grid[r][c] == 0)
for r, c in queue:
    dist[r][c] = 0
while queue:
    r, c = queue.popleft()
    for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
        if 0 <= nr < n and 0 <= nc < n and dist[nr][nc] is None:
            dist[nr][nc] = dist[r][c] + 1
            queue.append((nr, nc))
print("\\n".join(" ".join(map(str, row)) for row in dist))"""


def _spiral(m: Meta) -> str:
    return f"""grid = [list(row) for row in {m["matrix"]!r}]
out = []
while grid:
    out += grid.pop(0)
    grid = [list(row) for row in zip(*grid)][::-1]
print(" ".join(map(str, out)))"""


def _rotten_oranges(m: Meta) -> str:
    return f"""grid = [list(row) for row in {m["matrix"]!r}]
n, minutes = len(grid), 0
rotten = [(r, c) for r in range(n) for c in range(len(grid[0])) if grid[r][c] == 2]
while True:
    fresh = []
    for r, c in rotten:
        for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if 0 <= nr < n and 0 <= nc < len(grid[0]) and grid[nr][nc] == 1:
                grid[nr][nc] = 2
                fresh.append((nr, nc))
    if not fresh:
        break
    rotten, minutes = fresh, minutes + 1
print(-1 if any(1 in row for row in grid) else minutes)"""


def _word_sorting(m: Meta) -> str:
    return f"print(', '.join(sorted({m['transformed_words']!r}, reverse={m['direction'] == 'descending'})))"


def _letter_counting(m: Meta) -> str:
    return f"print(sum(w.lower().count({m['target_letter']!r}) for w in {m['span']!r}))"


def _count_bits(m: Meta) -> str:
    return f"print(bin({m['number']}).count('1'))"


def _base_conversion(m: Meta) -> str:
    return f"""n, base, digits = int({m["source_repr"]!r}, {m["source_base"]}), {m["target_base"]}, ""
while True:
    n, d = divmod(n, base)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"[d] + digits
    if n == 0:
        break
print(digits)"""


#: generator -> (family, answer kind, extra answer metadata, reference program)
PROGRAMS: dict[str, tuple[str, str, Meta, Callable[[Meta], str]]] = {
    "basic_arithmetic": ("math", "number", {}, _basic_arithmetic),
    "products": ("math", "number", {}, _products),
    "count_primes": ("math", "number", {}, _count_primes),
    "gcd": ("math", "number", {}, _gcd),
    "lcm": ("math", "number", {}, _lcm),
    "fraction_simplification": ("math", "reduced_fraction", {}, _fraction),
    "prime_factorization": ("math", "int_multiset", {}, _prime_factorization),
    "polynomial_multiplication": ("math", "expression", {"form": "expanded"}, _polynomial),
    "simple_equations": ("math", "number", {}, _simple_equations),
    "bitwise_arithmetic": ("math", "number", {}, _bitwise),
    "power_function": ("math", "number", {"rel_tol": 5e-3}, _power),  # "3 significant figures"
    "game_of_life": ("logic", "int_grid", {}, _game_of_life),
    "bf": ("logic", "text", {}, _bf),
    "mini_sudoku": ("logic", "sudoku", {}, _mini_sudoku),
    "largest_island": ("logic", "number", {}, _largest_island),
    "binary_matrix": ("logic", "int_grid", {}, _binary_matrix),
    "spiral_matrix": ("logic", "int_list", {}, _spiral),
    "rotten_oranges": ("logic", "number", {}, _rotten_oranges),
    "word_sorting": ("logic", "word_list", {}, _word_sorting),
    "letter_counting": ("logic", "number", {}, _letter_counting),
    "count_bits": ("logic", "number", {}, _count_bits),
    "base_conversion": ("logic", "text_ci", {}, _base_conversion),
}
