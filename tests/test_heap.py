"""release_freed gives memory a finished phase freed back to the OS."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from envgym.heap import release_freed, resident_bytes


def test_release_freed_returns_a_finished_training_phase_to_the_os() -> None:
    # In a child, so this process's state can neither hide nor cause the effect. A few training
    # steps of a small MLP on two threads, then every tensor dropped: glibc keeps a few hundred
    # MiB of it resident until the trim.
    code = textwrap.dedent(
        """
        import json, torch
        from envgym.heap import release_freed, resident_bytes
        torch.set_num_threads(2)
        layers = [torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)] * 4
        model = torch.nn.Sequential(*layers)
        opt = torch.optim.AdamW(model.parameters())
        for _ in range(3):
            model(torch.randn(2048, 512)).square().mean().backward()
            opt.step()
            opt.zero_grad()
        del model, opt, layers
        kept = resident_bytes()
        released = release_freed()
        print(json.dumps({"kept": kept, "released": released, "after": resident_bytes()}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    figures = json.loads(done.stdout)
    assert figures["released"] > 64 << 20, figures
    assert figures["after"] < figures["kept"] - (64 << 20), figures


def test_resident_bytes_and_release_in_this_process() -> None:
    assert resident_bytes() > 1 << 20
    assert release_freed() >= 0
