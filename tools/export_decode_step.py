#!/usr/bin/env python3
"""Exports one decoding step of a small transformers language model with a static KV cache,
as transformers exports it for on-device runtimes (`TorchExportableModuleWithStaticCache`):
the step takes one token and its position, writes the token's keys and values into the cache
in place (`index_copy_`) and returns the logits.

Usage:
    python3 tools/export_decode_step.py {gpt2,llama} OUT.pt2 [--cache N] [--seed N]

The model is tiny (2 layers, 16 wide, a vocabulary of 32) with random weights: the archive is
a fixture for how such steps reach Kiln (tests/fixtures/pt2/gpt2_decode_step.pt2), not a model
to run. Needs PyTorch and transformers 5.
"""

import argparse

import torch


def model(kind: str):
    if kind == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=32, n_positions=64,
                                          bos_token_id=0, eos_token_id=0))
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, vocab_size=32,
                                        max_position_embeddings=64, bos_token_id=0, eos_token_id=0))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kind", choices=["gpt2", "llama"])
    p.add_argument("out")
    p.add_argument("--cache", type=int, default=8, help="positions in the static cache")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    torch.manual_seed(a.seed)
    m = model(a.kind).eval()
    m.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static", max_length=a.cache,
        cache_config={"batch_size": 1, "max_cache_len": a.cache, "device": "cpu"})
    step = TorchExportableModuleWithStaticCache(m, batch_size=1, max_cache_len=a.cache)
    with torch.no_grad():
        ep = torch.export.export(step, (), {"input_ids": torch.tensor([[1]]), "cache_position": torch.tensor([0])},
                                 strict=False)
    torch.export.save(ep, a.out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
