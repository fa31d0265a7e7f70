#!/usr/bin/env python3
"""Exports small models with a dynamic batch and sequence length (`dynamic_shapes=`), and
PyTorch's outputs at several sizes in the range: the fixtures of tests/fixtures/dynamic.

Usage:
    python3 tools/export_dynamic.py OUT_DIR [--seed N]

Writes, for each model, `NAME.pt2` (torch.export's IR) and `NAME_core.pt2` (after
`run_decompositions()`: core ATen; GPT-2's with its attention written out, which PyTorch
decomposes over symbolic sizes where it cannot decompose `scaled_dot_product_attention`), and for each size `NAME.BxL.inputK.bin` and `NAME.BxL.expected0.bin`
(raw little-endian tensors), and `cases.json`: per archive, the symbol of each dynamic input
dim, its range, and the sizes with their files. The models are tiny with random weights:
- `mlp_ln`: linear, GELU, linear, residual and layer norm over `x` `[batch, seq, 32]`;
- `gpt2`: a one-layer GPT-2 LM (16 wide, vocabulary 32) over `input_ids` `[batch, seq]`;
- `bert`: a one-layer BERT (16 wide) over `input_ids` and an `attention_mask` with padding.
Needs PyTorch and transformers 5.
"""

import argparse
import json
from pathlib import Path

import torch

SIZES = [(1, 3), (2, 8), (4, 33)]
BATCH = (1, 16)
SEQ = (2, 64)


class MlpLn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(32, 64)
        self.down = torch.nn.Linear(64, 32)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x):
        return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


class Gpt2Logits(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


class BertHidden(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def models():
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=SEQ[1],
                                      bos_token_id=0, eos_token_id=0))
    bert = BertModel(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                vocab_size=32, max_position_embeddings=SEQ[1]))
    return {"mlp_ln": MlpLn(), "gpt2": Gpt2Logits(gpt2), "bert": BertHidden(bert)}


def inputs(name: str, b: int, seq: int, g: torch.Generator):
    if name == "mlp_ln":
        return {"x": torch.randn(b, seq, 32, generator=g)}
    ids = torch.randint(0, 32, (b, seq), generator=g)
    if name == "gpt2":
        return {"input_ids": ids}
    mask = torch.ones(b, seq, dtype=torch.int64)
    mask[0, seq - 1:] = 0  # the first sequence padded by one
    return {"input_ids": ids, "attention_mask": mask}


def symbols(ep) -> dict:
    """Each dynamic user input dim's symbol, `{"input:dim": "s23"}`, and each symbol's range."""
    dims = {}
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in ep.graph_signature.user_inputs:
            continue
        for d, size in enumerate(node.meta["val"].shape):
            if isinstance(size, torch.SymInt):
                dims[f"{node.name}:{d}"] = str(size)
    ranges = {str(s): [int(r.lower), int(r.upper)] for s, r in ep.range_constraints.items()}
    return {"dims": dims, "ranges": ranges}


def core_aten(m, ep, example, dynamic):
    """`ep` in core ATen (`run_decompositions()`). PyTorch 2.15 cannot decompose
    `scaled_dot_product_attention` over symbolic sizes (a view of a transposed tensor), so a
    transformers model whose decomposition fails is exported again with the same weights and
    its attention written out (`attn_implementation="eager"`: matmuls, a mask and a softmax),
    and that program decomposed."""
    try:
        return ep.run_decompositions()
    except Exception:
        config = getattr(getattr(m, "m", None), "config", None)
        if config is None or getattr(config, "_attn_implementation", "eager") == "eager":
            raise
    kept = config._attn_implementation
    config._attn_implementation = "eager"
    try:
        with torch.no_grad():
            eager = torch.export.export(m, (), example, dynamic_shapes=dynamic, strict=False)
        return eager.run_decompositions()
    finally:
        config._attn_implementation = kept


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(a.seed)
    cases = {}
    for name, m in models().items():
        m = m.eval()
        g = torch.Generator().manual_seed(a.seed)
        example = inputs(name, 2, 8, g)
        batch, seq = torch.export.Dim("batch", min=BATCH[0], max=BATCH[1]), torch.export.Dim("seq", min=SEQ[0],
                                                                                              max=SEQ[1])
        dynamic = {k: {0: batch, 1: seq} for k in example}
        with torch.no_grad():
            ep = torch.export.export(m, (), example, dynamic_shapes=dynamic, strict=False)
        # Each model in both of torch.export's IR forms: as exported, and in core ATen.
        archives = {name: ep}
        try:
            archives[f"{name}_core"] = core_aten(m, ep, example, dynamic)
        except Exception as error:  # PyTorch's own failure: reported, the model kept as exported
            print(f"{name}: no core ATen form ({type(error).__name__}: {str(error).splitlines()[0]})")
        sizes = []
        for b, seq in SIZES:
            xs = inputs(name, b, seq, g)
            with torch.no_grad():
                want = m(**xs)
            stem = f"{name}.{b}x{seq}"
            for k, t in enumerate(xs.values()):
                (a.out / f"{stem}.input{k}.bin").write_bytes(t.contiguous().numpy().tobytes())
            (a.out / f"{stem}.expected0.bin").write_bytes(want.contiguous().numpy().tobytes())
            sizes.append({"batch": b, "seq": seq, "inputs": [f"{stem}.input{k}.bin" for k in range(len(xs))],
                          "expected": f"{stem}.expected0.bin", "shape": list(want.shape)})
        for archive, program in archives.items():
            torch.export.save(program, a.out / f"{archive}.pt2")
            cases[archive] = {**symbols(program), "sizes": sizes}
    (a.out / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
    print(f"wrote {len(cases)} archives to {a.out}")


if __name__ == "__main__":
    main()
