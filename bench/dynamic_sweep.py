#!/usr/bin/env python3
"""Tiny language models of many families, exported with a dynamic batch and sequence length
and compiled once by `kiln.compile` (`--dynamic`), checked against eager at sizes across the
range: which families compile once, which fall back to a compile per size (and why), and
which fail. Runs on the cpu by default (no GPU needed); `--device cuda` on the GPU machine.

    KILN_BINARIES=target/debug python3 bench/dynamic_sweep.py [--device cpu] [--only llama,...]
"""

from __future__ import annotations

import argparse
import time
import traceback

import torch

SIZES = ((1, 5), (3, 17), (2, 40))


def families():
    """name -> (config class, model class, config kwargs), each tiny."""
    import transformers as t

    small = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64,
                 vocab_size=97, max_position_embeddings=128)
    return {
        "llama": (t.LlamaConfig, t.LlamaForCausalLM, dict(small, num_key_value_heads=2)),
        "qwen2": (t.Qwen2Config, t.Qwen2ForCausalLM, dict(small, num_key_value_heads=2)),
        "mistral": (t.MistralConfig, t.MistralForCausalLM, dict(small, num_key_value_heads=2)),
        "gpt_neox": (t.GPTNeoXConfig, t.GPTNeoXForCausalLM, small),
        "opt": (t.OPTConfig, t.OPTForCausalLM, dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                                                    ffn_dim=64, vocab_size=97, max_position_embeddings=128,
                                                    word_embed_proj_dim=32)),
        "bert": (t.BertConfig, t.BertModel, small),
        "roberta": (t.RobertaConfig, t.RobertaModel, dict(small, max_position_embeddings=130)),
        "distilbert": (t.DistilBertConfig, t.DistilBertModel, dict(dim=32, n_heads=4, n_layers=2, hidden_dim=64,
                                                                   vocab_size=97, max_position_embeddings=128)),
        "gpt2": (t.GPT2Config, t.GPT2LMHeadModel, dict(n_embd=32, n_head=4, n_layer=2, vocab_size=97,
                                                       n_positions=128)),
    }


class Logits(torch.nn.Module):
    """The model's first output as one tensor (logits or the last hidden state)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        out = self.model(input_ids=input_ids, use_cache=False) if "use_cache" in \
            self.model.forward.__code__.co_varnames else self.model(input_ids=input_ids)
        return out[0]


def run(name, spec, device) -> str:
    import kiln

    config_class, model_class, kwargs = spec
    torch.manual_seed(0)
    model = Logits(model_class(config_class(**kwargs))).eval()
    batch, seq = torch.export.Dim("batch", min=1, max=16), torch.export.Dim("seq", min=2, max=64)
    example = torch.randint(0, 97, (2, 8))
    with torch.no_grad():
        program = torch.export.export(model, (example,), dynamic_shapes=({0: batch, 1: seq},), strict=False)
    fn = kiln.compile(program, device=device)
    worst = 0.0
    for b, s in SIZES:
        ids = torch.randint(0, 97, (b, s))
        with torch.no_grad():
            want = model(ids)
            got = fn(ids.to(device))
        got = got[0] if isinstance(got, (tuple, list)) else got
        err = ((got.float().cpu() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-6)).item()
        worst = max(worst, err)
    how = "one compile" if getattr(fn, "whole", None) is not None else f"per size ({fn.per_size})"
    ok = "yes" if worst <= 1e-4 else "NO"
    return f"{how}, {fn.compiles} compile(s), rel error {worst:.1e}, ok {ok}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", default="")
    a = p.parse_args()
    only = set(filter(None, a.only.split(",")))
    print(f"# bench/dynamic_sweep.py: torch {torch.__version__}, device {a.device}, sizes {SIZES}")
    for name, spec in families().items():
        if only and name not in only:
            continue
        start = time.perf_counter()
        try:
            result = run(name, spec, a.device)
        except Exception as error:  # report every family
            lines = [l for l in str(error).strip().splitlines() if l.strip()]
            result = f"FAILED: {type(error).__name__}: {lines[0][:300] if lines else ''}"
            if "--verbose" in __import__("sys").argv:
                traceback.print_exc()
        print(f"| {name} | {result} | {time.perf_counter() - start:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
