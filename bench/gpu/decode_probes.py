"""Probes of a compiled decoding step's output_code.py for `decode_ablate.py --edit NAME` and
`decode_profile.py --edit NAME`, beside `decode_edits.py`'s launch configs (all in its EDITS
once this module is imported). Each rewrites GPT-2's step (small, bf16 or fp32: 12 heads of 64,
768 wide, attention in 32 splits) to bound what a change of the code Kiln generates could save.
Some keep the results (the logits' error against the base says so: 0); others are timing only.
`bench/gpu/results/2026-11-28-decode-probes-h100.txt` has what each measured on the H100."""

from __future__ import annotations

import re

from decode_edits import EDITS, LAUNCH, gpt2_role

PROBES: dict = {}


# Probes: split-K fusions of GPT-2's step, each product's sum spread over programs that add
# their parts into float32 with atomics. Timing only: the parts go to a scratch buffer no one
# reads, and the kernel's real output gets its residual and bias alone (wrong results, the
# same launches, reads, atomics and writes as a correct version).
SPLITK_KERNELS = '''

@triton.jit
def kiln_probe_cproj(P, in_ptr1, in_ptr2, in_ptr3, acc_ptr, out_ptr0,
                     NT: tl.constexpr, HEADS: tl.constexpr, SPLITS: tl.constexpr, EV: tl.constexpr):
    # Attention's combine for one head, then its part of the output projection for NT outputs.
    head = tl.program_id(0) % HEADS
    offs_n = (tl.program_id(0) // HEADS) * NT + tl.arange(0, NT)
    offs_e = tl.arange(0, EV)
    w = tl.load(in_ptr1 + (HEADS * EV) * offs_n[:, None] + head * EV + offs_e[None, :])
    kiln_dependent_wait()
    part = (head * SPLITS + tl.arange(0, SPLITS)) * (EV + 2)
    m_s = tl.load(P + part + EV)
    l_s = tl.load(P + part + EV + 1)
    m = tl.max(m_s, 0)
    ws = tl.math.exp2(m_s - tl.where(m == float("-inf"), 0.0, m))
    l_sum = tl.sum(l_s * ws, 0)
    acc = tl.load(P + part[:, None] + offs_e[None, :])
    y = (tl.sum(acc * ws[:, None], 0) / tl.where(l_sum == 0.0, 1.0, l_sum)).to(tl.bfloat16).to(tl.float32)
    out = tl.sum(w.to(tl.float32) * y[None, :], 1)
    tl.atomic_add(acc_ptr + offs_n, out, sem="relaxed")
    if head == 0:
        r = tl.load(in_ptr3 + offs_n).to(tl.float32) + tl.load(in_ptr2 + offs_n).to(tl.float32)
        tl.store(out_ptr0 + offs_n, r)


@triton.jit
def kiln_probe_mlp(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, in_ptr5, in_ptr6, acc_ptr, out_ptr0,
                   XBLOCK: tl.constexpr, RBLOCK: tl.constexpr, D: tl.constexpr, HID: tl.constexpr):
    # The MLP's layer norm and first product for XBLOCK hidden units, their GELU, and their
    # part of the second product for every output.
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    rindex = tl.arange(0, RBLOCK)[None, :]
    rmask = rindex < D
    w1 = tl.load(in_ptr3 + D * xindex + rindex, rmask, other=0)
    w2 = tl.load(in_ptr5 + HID * rindex + xindex, rmask, other=0)
    lw = tl.load(in_ptr1 + rindex, rmask, other=0).to(tl.float32)
    lb = tl.load(in_ptr2 + rindex, rmask, other=0).to(tl.float32)
    b1 = tl.load(in_ptr4 + xindex).to(tl.float32)
    kiln_dependent_wait()
    x = tl.load(in_ptr0 + rindex, rmask, other=0).to(tl.float32)
    mean = tl.sum(x, 1)[:, None] / D
    d = tl.where(rmask, x - mean, 0.0)
    var = tl.sum(d * d, 1)[:, None] / D
    y = (d * libdevice.rsqrt(var + 1e-5) * lw + lb).to(tl.bfloat16).to(tl.float32)
    h = (tl.sum(y * w1.to(tl.float32), 1)[:, None]).to(tl.bfloat16).to(tl.float32) + b1
    g = 0.5 * h * (1.0 + libdevice.tanh(0.7978845608028654 * (h + 0.044715 * h * h * h)))
    part = tl.sum(g * w2.to(tl.float32), 0)
    offs = tl.arange(0, RBLOCK)
    tl.atomic_add(acc_ptr + offs, part, mask=offs < D, sem="relaxed")
    if tl.program_id(0) == 0:
        r = tl.load(in_ptr0 + offs, offs < D).to(tl.float32) + tl.load(in_ptr6 + offs, offs < D).to(tl.float32)
        tl.store(out_ptr0 + offs, r, offs < D)

'''
SCRATCH = "        _probe_acc = empty_strided_device((4096,), (1,), torch.float32)\n"
SPLITS_LAUNCH = re.compile(r"KERNELS\.kiln_flash_attention_0\[[^\]]*\]\(\w+, \w+, \w+, \w+, (\w+),")
COMBINE = re.compile(r", KERNELS\.kiln_flash_combine_\d+\[[^\]]*\]\([^()]*\)\)")
OUT_PROJ = re.compile(r"KERNELS\.kiln_red_fused_sum_mul_unsqueeze_to_copy_add_view_\d+\[\(192, 1, 1\)\]"
                      r"\((\w+), (\w+), (\w+), (\w+), (\w+), 768, 768, 4, 1024, stream=stream0\)")
FC1 = re.compile(r"KERNELS\.kiln_red_fused_mean_to_copy_mul_sub_view_add_\d+\[\(768, 1, 1\)\]"
                 r"\((\w+), (\w+), (\w+), (\w+), (\w+), \w+, 3072, 768, 4, 1024, stream=stream0\)")
FC2 = re.compile(r"KERNELS\.(kiln_red_fused_sum_mul_unsqueeze_to_copy_add_view_\d+)\[\(192, 1, 1\)\]"
                 r"\(\w+, (\w+), (\w+), (\w+), (\w+), 768, 3072, 4, 4096, stream=stream0\)")


def _probe_meta(name: str, function: str, signature: dict, constants: dict, warps: int) -> str:
    import json

    meta = {"function": function, "signature": signature, "constants": constants,
            "aligned": [k for k in signature], "num_warps": warps, "num_stages": 1,
            "autotuned": False, "dependent": True}
    return f"    {json.dumps(name)}: {json.dumps(meta).replace('false', 'False').replace('true', 'True')},\n"


def _with_probe_kernels(code: str, metas: list[str]) -> str:
    code = code.replace("\n# The Triton target (GPUTarget)", SPLITK_KERNELS + "\n# The Triton target (GPUTarget)", 1)
    code = code.replace("KERNEL_META = {\n", "KERNEL_META = {\n" + "".join(metas), 1)
    return code.replace("        stream0 = get_raw_stream(0)\n", "        stream0 = get_raw_stream(0)\n" + SCRATCH, 1)


def _projection_reads_splits(code: str, attention_line, call) -> tuple[str, int]:
    """`code` with each attention's combining launch dropped (its line also rewritten by
    `attention_line`) and the output projection after it launched as `call(splits, match)`:
    a kernel that reads the attention's partial results, which live until it has run."""
    lines, count, splits = [], 0, None
    for line in code.splitlines(keepends=True):
        m = SPLITS_LAUNCH.search(line)
        if m:
            splits = m.group(1)
            line = attention_line(COMBINE.sub(", None)", line))
        if splits and line.lstrip().startswith("del ") and splits in line:
            names = [n for n in line.strip()[4:].split(", ") if n != splits]
            line = line[:len(line) - len(line.lstrip())] + "del " + ", ".join(names) + "\n" if names else ""
        m = OUT_PROJ.search(line)
        if m and splits:
            count += 1
            line = line[:m.start()] + call(splits, m) + line[m.end():]
        lines.append(line)
    return "".join(lines), count


def cproj(nt: int, warps: int):
    """GPT-2's combine and output projection in one launch of 12 heads x 768/nt outputs."""
    sig = {"P": "*fp32", "in_ptr1": "*bf16", "in_ptr2": "*bf16", "in_ptr3": "*bf16", "acc_ptr": "*fp32",
           "out_ptr0": "*bf16"}
    consts = {"NT": nt, "HEADS": 12, "SPLITS": 32, "EV": 64}

    def edit(code: str) -> tuple[str, int]:
        code, count = _projection_reads_splits(code, lambda line: line, lambda splits, m: (
            f"KERNELS.kiln_probe_cproj_{nt}[({12 * 768 // nt}, 1, 1)]({splits}, {m.group(2)}, {m.group(3)}, "
            f"{m.group(4)}, _probe_acc, {m.group(5)}, {nt}, 12, 32, 64, stream=stream0)"))
        meta = _probe_meta(f"kiln_probe_cproj_{nt}", "kiln_probe_cproj", sig, consts, warps)
        return _with_probe_kernels(code, [meta]), count
    return edit


def mlp(x_block: int, warps: int):
    """GPT-2's MLP in one launch of 3072/x_block programs."""
    def sig(out: str) -> dict:
        return {**{f"in_ptr{i}": "*bf16" for i in range(7)}, "acc_ptr": "*fp32", "out_ptr0": out}
    consts = {"XBLOCK": x_block, "RBLOCK": 1024, "D": 768, "HID": 3072}

    def edit(code: str) -> tuple[str, int]:
        lines, count, fc1 = [], 0, None
        for line in code.splitlines(keepends=True):
            m = FC1.search(line)
            if m:
                fc1 = m
                line = line[:m.start()] + "None" + line[m.end():]
            m = FC2.search(line)
            if m and fc1:
                count += 1
                f32 = re.search(rf'"{m.group(1)}": {{"signature": {{[^}}]*"out_ptr0": "\*fp32"', code)
                name = f"kiln_probe_mlp_{x_block}" + ("_f32" if f32 else "")
                h, lw, lb, w1, b1 = fc1.groups()
                call = (f"KERNELS.{name}[({3072 // x_block}, 1, 1)]({h}, {lw}, {lb}, {w1}, {b1}, {m.group(2)}, "
                        f"{m.group(4)}, _probe_acc, {m.group(5)}, {x_block}, 1024, 768, 3072, stream=stream0)")
                line = line[:m.start()] + call + line[m.end():]
            lines.append(line)
        metas = [_probe_meta(f"kiln_probe_mlp_{x_block}", "kiln_probe_mlp", sig("*bf16"), consts, warps),
                 _probe_meta(f"kiln_probe_mlp_{x_block}_f32", "kiln_probe_mlp", sig("*fp32"), consts, warps)]
        return _with_probe_kernels("".join(lines), metas), count
    return edit


def both(nt: int, cw: int, x_block: int, mw: int):
    first, second = cproj(nt, cw), mlp(x_block, mw)

    def edit(code: str) -> tuple[str, int]:
        code, a = first(code)
        code = code.replace(SPLITK_KERNELS, "", 1).replace(SCRATCH, "", 1)
        code, b = second(code)
        return code, a + b
    return edit


PROBES.update({"cproj_64_w4": cproj(64, 4), "cproj_32_w2": cproj(32, 2), "cproj_16_w1": cproj(16, 1),
              "mlp_16_w8": mlp(16, 8), "mlp_32_w8": mlp(32, 8), "mlp_8_w4": mlp(8, 4),
              "both_32_16": both(32, 2, 16, 8), "both_64_32": both(64, 4, 32, 8)})


# Probes of the one-row split attention's reads (GPT-2's launches: 12 heads, 64 wide, 32 splits).
ATTENTION_TAIL = ", 1, 12, 1, 1024, 1, 64, 64, 1, 32, 64, 64, 0, 2, 32, 1, 32, stream=stream0)"


def live_keys(keys: int):
    """The attention reading only the first `keys` of the cache (the keys the mask keeps at
    position keys - 1): bounds what skipping the keys a mask removes could save."""
    def edit(code: str) -> tuple[str, int]:
        n = code.count(ATTENTION_TAIL)
        return code.replace(ATTENTION_TAIL, ATTENTION_TAIL.replace(", 1024, ", f", {keys}, ", 1)), n
    return edit


def no_prefetch(code: str) -> tuple[str, int]:
    n = code.count(ATTENTION_TAIL)
    code = code.replace(ATTENTION_TAIL, ATTENTION_TAIL.replace(", 32, 1, 32, stream", ", 32, 0, 32, stream"))
    return re.sub(r'("kiln_flash_attention_0": .*?"PREFETCH": )1', r"\g<1>0", code, count=1), n


PROBES.update({"live_513": live_keys(513), "no_prefetch": no_prefetch, "cproj_8_w1": cproj(8, 1),
              "cproj_16_w2": cproj(16, 2)})


# Probes: the split attention never reading the keys its mask removes. `skip_masked` loads each
# block's mask first and its keys and values only where the mask keeps them (after the wait,
# where the mask is written). `skip_masked_pf` also limits the prefetch before the wait to the
# kept keys, reading the mask there; that is sound only where every kernel before has finished,
# so the kernels launched just before an attention trigger their dependents after their wait.
MAIN_KV = ("            k = tl.load(k_base + offs_n[:, None] * skn + offs_e[None, :] * ske,\n"
           "                        mask=keep[:, None] & (offs_e[None, :] < E), other=0.0)\n"
           "            v = tl.load(v_base + offs_n[:, None] * svn + offs_ev[None, :] * sve,\n"
           "                        mask=keep[:, None] & (offs_ev[None, :] < EV), other=0.0)\n"
           "            if MASK_KIND != 0:\n"
           "                mv = tl.load(m_base + offs_n * smn, mask=keep, other=0)\n")
MAIN_KV_SKIP = ("            if MASK_KIND != 0:\n"
                "                mv = tl.load(m_base + offs_n * smn, mask=keep, other=0)\n"
                "            live = keep\n"
                "            if MASK_KIND == 1:\n"
                "                live = keep & (mv != 0)\n"
                "            if MASK_KIND == 2:\n"
                "                live = keep & (mv.to(tl.float32) != float('-inf'))\n"
                "            k = tl.load(k_base + offs_n[:, None] * skn + offs_e[None, :] * ske,\n"
                "                        mask=live[:, None] & (offs_e[None, :] < E), other=0.0)\n"
                "            v = tl.load(v_base + offs_n[:, None] * svn + offs_ev[None, :] * sve,\n"
                "                        mask=live[:, None] & (offs_ev[None, :] < EV), other=0.0)\n")
PF_KEEP = "            keep = offs_n < pf_hi\n"
PF_KEEP_LIVE = (PF_KEEP +
                "            if MASK_KIND == 2:\n"
                "                pf_mv = tl.load(M + (pf_bh // H) * smb + (pf_bh % H) * smh\n"
                "                                + ((pf // SPLITS) % L) * smm + offs_n * smn,\n"
                "                                mask=keep, other=float('-inf'), cache_modifier='.cg')\n"
                "                keep = keep & (pf_mv.to(tl.float32) != float('-inf'))\n")
LATE = ("\n@triton.jit\ndef kiln_dependent_wait_late():\n    if KILN_PDL:\n        tl.extra.cuda.gdc_wait()\n"
        "        tl.extra.cuda.gdc_launch_dependents()\n\n")


def skip_masked(code: str) -> tuple[str, int]:
    n = code.count(MAIN_KV)
    return code.replace(MAIN_KV, MAIN_KV_SKIP), n


def before_attention(code: str) -> set[str]:
    """The kernels launched just before an attention."""
    names, last = set(), None
    for line in code.splitlines():
        m = re.search(r"KERNELS\.(\w+)\[", line)
        if m and "ATTENTION.run" in line and last:
            names.add(last)
        elif m:
            last = m.group(1)
    return names


def late_trigger(code: str) -> tuple[str, int]:
    names = before_attention(code)
    code = code.replace("\n@triton.jit\ndef kiln_prefetch_l2", LATE + "@triton.jit\ndef kiln_prefetch_l2", 1)
    for name in names:
        start = code.index(f"def {name}(")
        end = code.index("\n@triton.jit", start)
        late = code[start:end].replace("kiln_dependent_wait()", "kiln_dependent_wait_late()")
        code = code[:start] + late + code[end:]
    return code, len(names)


def skip_masked_pf(code: str) -> tuple[str, int]:
    code, n = skip_masked(code)
    code, m = late_trigger(code)
    return code.replace(PF_KEEP, PF_KEEP_LIVE, 1), n + m


PROBES.update({"skip_masked": skip_masked, "late_trigger": late_trigger, "skip_masked_pf": skip_masked_pf})


# Probe: the range each program reads cut, before the wait, to its mask's kept keys (first to
# last), with the prefetch limited to them; the loop after the wait as before, over that range.
PF_LOOP = "        for start_n in range(pf_lo, pf_hi, BLOCK_N):\n"
PF_LOOP_LIVE = ("        live_lo = pf_hi\n        live_hi = pf_lo\n" + PF_LOOP)
PF_PREFETCH_K = "            kiln_prefetch_l2(K + (pf_bh // H) * skb"
PF_RANGE = ("            live_lo = tl.minimum(live_lo, tl.min(tl.where(keep, offs_n, pf_hi), 0))\n"
            "            live_hi = tl.maximum(live_hi, tl.max(tl.where(keep, offs_n + 1, pf_lo), 0))\n")
MAIN_RANGE = "            hi = tl.minimum(hi, row + 1)\n"
MAIN_RANGE_LIVE = (MAIN_RANGE + "        if pid == tl.program_id(0):\n"
                   "            lo = tl.maximum(lo, live_lo)\n            hi = tl.minimum(hi, live_hi)\n")


def range_pf(code: str) -> tuple[str, int]:
    code, n = late_trigger(code)
    code = code.replace(PF_KEEP, PF_KEEP_LIVE, 1).replace(PF_LOOP, PF_LOOP_LIVE, 1)
    code = code.replace(PF_PREFETCH_K, PF_RANGE + PF_PREFETCH_K, 1)
    return code.replace(MAIN_RANGE, MAIN_RANGE_LIVE, 1), n


PROBES["range_pf"] = range_pf


def no_wait(code: str) -> tuple[str, int]:
    """Probe: no kernel waits for the one before (results wrong): the step's time with its
    kernels' dependencies gone, which bounds what fewer or cheaper boundaries could save."""
    old = "        tl.extra.cuda.gdc_launch_dependents()\n        tl.extra.cuda.gdc_wait()\n"
    return code.replace(old, "        tl.extra.cuda.gdc_launch_dependents()\n"), code.count(old)


PROBES["no_wait"] = no_wait


# Probe: each product kernel, before its wait, prefetches into L2 its share of the weights of the
# `ahead` products launched after it, so that their loads find L2 rather than the memory a
# kernel's programs can only start reading once there is room on the device for them.
PREFETCH_SPAN = '''
@triton.jit
def kiln_prefetch_span(ptr, n):
    # This program's share of the n elements at ptr, one prefetch per 128-byte line.
    LINE: tl.constexpr = 1024 // ptr.dtype.element_ty.primitive_bitwidth
    lines = tl.cdiv(n, LINE)
    per = tl.cdiv(lines, tl.num_programs(0))
    first = tl.program_id(0) * per
    last = tl.minimum(first + per, lines)
    for i in range(first, last, 256):
        idx = i + tl.arange(0, 256)
        kiln_prefetch_l2(ptr + idx.to(tl.int64) * LINE, idx < last)

'''
SLOTS = 4


def _weights(args: str) -> list[str]:
    return [a for a in args.split(", ") if a.startswith("const_p_") and "weight" in a
            and "_ln_" not in a and "lm_head" not in a and "wpe" not in a]


def l2_ahead(ahead: int):
    def edit(code: str) -> tuple[str, int]:
        launches = [m for m in LAUNCH.finditer(code) if gpt2_role(m.group(1), int(m.group(4)), int(m.group(5)))]
        names = {m.group(1) for m in launches}
        out, last, count = [], 0, 0
        for i, m in enumerate(launches):
            targets = [w for later in launches[i + 1:i + 1 + ahead] for w in _weights(later.group(3))][:SLOTS]
            extra = [x for w in targets for x in (w, f"{w}.numel()")]
            extra += [x for _ in range(SLOTS - len(targets)) for x in (launches[i].group(3).split(", ")[0], "0")]
            call = (f"KERNELS.{m.group(1)}[({m.group(2)}, 1, 1)]({m.group(3)}, {m.group(4)}, {m.group(5)}, "
                    f"{m.group(6)}, {m.group(7)}, {', '.join(extra)}, stream=stream0)")
            out += [code[last:m.start()], call]
            last = m.end()
            count += 1
        code = "".join(out) + code[last:]
        params = ", ".join(f"pf{j}, pf{j}_n" for j in range(SLOTS))
        body = "".join(f"    if KILN_PDL:\n        kiln_prefetch_span(pf{j}, pf{j}_n)\n" for j in range(SLOTS))
        for name in names:
            head = re.search(rf"def {name}\((.*?), XBLOCK: tl.constexpr, RBLOCK: tl.constexpr\):\n", code)
            code = (code[:head.start()] + f"def {name}({head.group(1)}, XBLOCK: tl.constexpr, "
                    f"RBLOCK: tl.constexpr, {params}):\n" + body + code[head.end():])
            sig = re.search(rf'"{name}": {{"signature": {{(.*?)}}', code)
            first = re.search(r'"(\w+)": "(\*\w+)"', sig.group(1))
            added = ", ".join(f'"pf{j}": "*bf16", "pf{j}_n": "i32"' for j in range(SLOTS))
            code = code[:sig.end(1)] + ", " + added + code[sig.end(1):]
            assert first
        code = code.replace("\n@triton.jit\ndef kiln_prefetch_l2", "\n@triton.jit\ndef kiln_prefetch_l2", 1)
        at = code.index("@triton.jit", code.index("def kiln_prefetch_l2"))
        return code[:at] + PREFETCH_SPAN.lstrip("\n") + "\n\n" + code[at:], count
    return edit


PROBES.update({"l2_ahead1": l2_ahead(1), "l2_ahead2": l2_ahead(2), "l2_ahead3": l2_ahead(3)})


# Probe (correct results): attention in fewer splits, and its combine done again by every
# program of the output projection that reads it (no combining launch, no atomics).
READER_KERNEL = '''

@triton.jit
def kiln_probe_rcproj(P, in_ptr1, in_ptr2, in_ptr3, out_ptr0, XBLOCK: tl.constexpr, HEADS: tl.constexpr,
                      HP2: tl.constexpr, SPLITS: tl.constexpr, EV: tl.constexpr):
    D: tl.constexpr = HEADS * EV
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    rindex = tl.arange(0, HP2 * EV)[None, :]
    rmask = rindex < D
    w = tl.load(in_ptr1 + D * xindex + rindex, rmask, other=0)
    bias = tl.load(in_ptr2 + xindex).to(tl.float32)
    kiln_dependent_wait()
    offs_h = tl.arange(0, HP2)
    offs_s = tl.arange(0, SPLITS)
    offs_e = tl.arange(0, EV)
    hmask = offs_h < HEADS
    part = (offs_h[:, None] * SPLITS + offs_s[None, :]) * (EV + 2)
    m_s = tl.load(P + part + EV, hmask[:, None], other=float("-inf"))
    l_s = tl.load(P + part + EV + 1, hmask[:, None], other=0.0)
    acc = tl.load(P + part[:, :, None] + offs_e[None, None, :], hmask[:, None, None], other=0.0)
    m = tl.max(m_s, 1)
    ws = tl.math.exp2(m_s - tl.where(m == float("-inf"), 0.0, m)[:, None])
    l_sum = tl.sum(l_s * ws, 1)
    y = tl.sum(acc * ws[:, :, None], 1) / tl.where(l_sum == 0.0, 1.0, l_sum)[:, None]
    y = tl.reshape(y.to(tl.bfloat16).to(tl.float32), [1, HP2 * EV])
    red = tl.sum(tl.where(rmask, w.to(tl.float32) * y, 0.0), 1)[:, None]
    res = tl.load(in_ptr3 + xindex).to(tl.float32)
    out = (bias + red.to(tl.bfloat16).to(tl.float32)) + res
    tl.store(out_ptr0 + xindex, out.to(tl.bfloat16))

'''


def reader_combine(splits: int, x_block: int, warps: int):
    sig = {"P": "*fp32", "in_ptr1": "*bf16", "in_ptr2": "*bf16", "in_ptr3": "*bf16", "out_ptr0": "*bf16"}
    consts = {"XBLOCK": x_block, "HEADS": 12, "HP2": 16, "SPLITS": splits, "EV": 64}
    name = f"kiln_probe_rcproj_{splits}_{x_block}_{warps}"

    def edit(code: str) -> tuple[str, int]:
        tail = ATTENTION_TAIL.replace(", 32, 1, 32, stream", f", {splits}, 1, 0, stream")

        def attention(line: str) -> str:
            return line.replace(ATTENTION_TAIL, tail).replace(
                "KERNELS.kiln_flash_attention_0[(384, 1, 1)]", f"KERNELS.kiln_flash_attention_0[({12 * splits}, 1, 1)]")

        code, count = _projection_reads_splits(code, attention, lambda held, m: (
            f"KERNELS.{name}[({768 // x_block}, 1, 1)]({held}, {m.group(2)}, {m.group(3)}, "
            f"{m.group(4)}, {m.group(5)}, {x_block}, 12, 16, {splits}, 64, stream=stream0)"))
        code = re.sub(r'("kiln_flash_attention_0": .*?"SPLITS": )32', rf"\g<1>{splits}", code, count=1)
        code = code.replace("\n# The Triton target (GPUTarget)", READER_KERNEL + "\n# The Triton target (GPUTarget)", 1)
        meta = _probe_meta(name, "kiln_probe_rcproj", sig, consts, warps)
        return code.replace("KERNEL_META = {\n", "KERNEL_META = {\n" + meta, 1), count
    return edit


for s, x, w in ((4, 4, 4), (8, 4, 4), (16, 4, 4), (8, 2, 4), (8, 4, 8), (4, 2, 2)):
    PROBES[f"rcproj_s{s}_x{x}_w{w}"] = reader_combine(s, x, w)


def wait_last(pattern: str):
    """Probe (correct results where the kernels named read nothing an earlier kernel of the step
    writes, and write nothing one reads): their wait moved after their stores, so that they run
    beside the kernel before them; a kernel after still waits for both, through them."""
    def edit(code: str) -> tuple[str, int]:
        count = 0
        for name in set(re.findall(r"def (kiln_\w+)\(", code)):
            if not re.search(pattern, name):
                continue
            start = code.index(f"def {name}(")
            end = code.index("\n\n", start)
            body = code[start:end]
            if body.count("kiln_dependent_wait()") != 1:
                continue
            indent = re.search(r"\n( +)kiln_dependent_wait\(\)", body).group(1)
            body = body.replace(f"\n{indent}kiln_dependent_wait()", "") + f"\n{indent}kiln_dependent_wait()"
            code = code[:start] + body + code[end:]
            count += 1
        return code, count
    return edit


PROBES["mask_wait_last"] = wait_last(r"^kiln_poi_fused_add_to_copy_where_le_reshape_\d+$")


EDITS.update(PROBES)
