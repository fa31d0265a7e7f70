"""Edits of a compiled decoding step's output_code.py for `decode_ablate.py --edit NAME`: each
takes the file's text and gives the new text and how many places it changed. Launch configs
keep the step correct; a probe may not (it bounds what a change could save)."""

from __future__ import annotations

import re

LAUNCH = re.compile(r"KERNELS\.(\w+)\[\((\d+), 1, 1\)\]\((.*), (\d+), (\d+), (\d+), (\d+), stream=stream0\)")


def substitute(code: str, regex: re.Pattern, pattern: str, replacement) -> tuple[str, int]:
    """`code` with each match of `regex` whose first group (a kernel's name) matches `pattern`
    replaced by `replacement(match)`, and how many were."""
    found = re.compile(pattern)
    count = 0

    def one(m):
        nonlocal count
        if not found.search(m.group(1)):
            return m.group(0)
        count += 1
        return replacement(m)

    return regex.sub(one, code), count


def widest_reduction(code: str) -> str:
    """The reduction kernel launched over the most rows (a language model's head)."""
    return max(((m.group(1), int(m.group(4))) for m in LAUNCH.finditer(code)), key=lambda t: t[1])[0]


def config(code: str, kernel: str, x_block: int, warps: int) -> tuple[str, int]:
    """`kernel`'s launches with `x_block` rows a program (its grid one program per block of
    rows) and `warps` warps."""
    def launch(m):
        rows = int(m.group(4))
        grid = -(-rows // x_block)
        return (f"KERNELS.{kernel}[({grid}, 1, 1)]({m.group(3)}, {rows}, {m.group(5)}, {x_block}, "
                f"{m.group(7)}, stream=stream0)")

    code, count = substitute(code, LAUNCH, rf"^{kernel}$", launch)
    meta = re.compile(rf'("{kernel}": {{.*?"constants": {{"XBLOCK": )\d+(.*?"num_warps": )\d+')
    code, n = meta.subn(rf"\g<1>{x_block}\g<2>{warps}", code)
    assert n == 1, f"{kernel}'s meta"
    return code, count


def warps_of(pattern: str, warps: int):
    """Every kernel whose name matches `pattern` in `warps` warps (its rows a program kept)."""

    meta = re.compile(r'"(kiln_\w+)": {"signature".*?"num_warps": \d+')
    return lambda code: substitute(code, meta, pattern, lambda m: f"{m.group(0).rsplit(' ', 1)[0]} {warps}")


def lm(x_block: int, warps: int):
    return lambda code: config(code, widest_reduction(code), x_block, warps)


# Probe: the one-row split attention loads its keys and values before it waits for the kernel
# before it (which writes this step's row of the cache: that row is then stale, and the results
# wrong), then its query after. Bounds what a step that writes the cache elsewhere could save.
WAIT = "    kiln_dependent_wait()\n    for pid in range(tl.program_id(0), L * Z * H * SPLITS, tl.num_programs(0)):\n"
V_LOAD = ("            v = tl.load(v_base + offs_n[:, None] * svn + offs_ev[None, :] * sve,\n"
          "                        mask=keep[:, None] & (offs_ev[None, :] < EV), other=0.0)\n")
Q_AFTER = ("            kiln_dependent_wait()\n"
           "            q = tl.load(Q + off_b * sqb + off_h * sqh + row * sqm + offs_e * sqe,\n"
           "                        mask=offs_e < E, other=0.0).to(tl.float32) * qk_scale\n")


def kv_before_wait(code: str) -> tuple[str, int]:
    n = code.count(WAIT)
    code = code.replace(WAIT, WAIT.replace("    kiln_dependent_wait()\n", "", 1))
    code = code.replace(V_LOAD, V_LOAD + Q_AFTER)
    return code, n


EDITS = {
    "lm_x8_w8": lm(8, 8),
    "lm_x8_w4": lm(8, 4),
    "lm_x4_w2": lm(4, 2),
    "lm_x4_w1": lm(4, 1),
    "lm_x2_w1": lm(2, 1),
    "lm_x16_w8": lm(16, 8),
    "kv_before_wait": kv_before_wait,
}


def gpt2_role(name: str, rows: int, length: int) -> str | None:
    """The role of a GPT-2 step's reduction kernel by its launch's rows and reduction length."""
    if (rows, length) == (3072, 768):
        return "fc1"
    if (rows, length) == (768, 3072):
        return "fc2"
    if (rows, length) == (768, 768):
        return "out" if "_add_view_" in name else "qkv"
    return None


def kernels_of_role(code: str, role: str) -> set[str]:
    """The names of the GPT-2 step's kernels of `role` (`gpt2_role`) in `code`."""
    return {m.group(1) for m in LAUNCH.finditer(code)
            if gpt2_role(m.group(1), int(m.group(4)), int(m.group(5))) == role}


def rows_of(role: str, x_block: int, warps: int):
    """Every GPT-2 kernel of `role` with `x_block` rows a program and `warps` warps."""
    def edit(code: str) -> tuple[str, int]:
        count = 0
        for name in kernels_of_role(code, role):
            code, n = config(code, name, x_block, warps)
            count += n
        return code, count
    return edit


def warps_of_role(role: str, warps: int):
    """Every GPT-2 kernel of `role` in `warps` warps (its rows a program kept)."""
    def edit(code: str) -> tuple[str, int]:
        names = kernels_of_role(code, role)
        return warps_of("^(" + "|".join(sorted(names)) + ")$", warps)(code) if names else (code, 0)
    return edit


# GPT-2's products by role (their kernels found by their launches' shapes): the q/k/v product (its
# layer norm taken in), the attention's output projection, the MLP's first product (its layer norm
# taken in) and second.
for role in ("qkv", "out", "fc1", "fc2"):
    for w in (1, 2, 8):
        EDITS[f"{role}_w{w}"] = warps_of_role(role, w)
    for x_block, w in ((2, 2), (2, 4), (8, 4), (8, 8), (16, 8)):
        EDITS[f"{role}_x{x_block}_w{w}"] = rows_of(role, x_block, w)
