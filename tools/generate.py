#!/usr/bin/env python3
"""Greedy decoding through a prefill and a decoding step Kiln compiled, against transformers' `generate`.

Builds a language model with random weights (`gpt2`, or `llama` with grouped-query attention,
small or at a preset's real size), exports two programs with a static KV cache as transformers
exports them for on-device runtimes (tools/export_decode_step.py's export): the prefill, over the
prompt's tokens, and the one-token decoding step. Both are compiled with `kiln.compile`; the step
shares the prefill's cache (`share_state`). The prefill fills the cache with the prompt, then the
step decodes `--steps` tokens, each the argmax of the logits. The same model's eager `generate`
(greedy) gives the reference tokens and logits.

A step where Kiln's token differs from eager's is allowed only where eager's two best logits at
that step are within float32 noise (`--noise`, relative to the largest logit); the sequences part
there, and the comparison stops. Any other difference fails (exit status 1).

    python3 tools/generate.py {gpt2,llama,gpt2-small,llama-170m} [--steps 64] [--prompt 5] [--device cpu]
        [--cache N] [--mode reduce-overhead] [--layers 2] [--hidden 64] [--heads 4] [--kv-heads 2] [--vocab 128] [--seed 0] [--init 0.2]

Needs PyTorch, transformers 5 and the kiln package (PYTHONPATH=python with KILN_HOST naming a
built host, or the package installed).
"""

from __future__ import annotations

import argparse
import sys

import torch


# The real sizes of issue "LLM decoding": GPT-2 small (124 M) and a 170 M Llama-style model.
PRESETS = {
    "gpt2-small": dict(kind="gpt2", layers=12, hidden=768, heads=12, vocab=50257),
    "llama-170m": dict(kind="llama", layers=8, hidden=1024, heads=16, kv_heads=4, vocab=32000),
}


def language_model(a):
    """The model, in float32 and eval mode, with `a`'s sizes and positions for the cache."""
    positions = max(a.prompt + a.steps, a.cache)
    if a.kind == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(n_layer=a.layers, n_embd=a.hidden, n_head=a.heads, vocab_size=a.vocab,
                            n_positions=positions, bos_token_id=0, eos_token_id=0,
                            initializer_range=a.init)
        return GPT2LMHeadModel(config).eval()
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=a.hidden, intermediate_size=2 * a.hidden, num_hidden_layers=a.layers,
                         num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, vocab_size=a.vocab,
                         max_position_embeddings=positions, bos_token_id=0, eos_token_id=0,
                         initializer_range=a.init)
    return LlamaForCausalLM(config).eval()


def export_step(m, cache: int, device: str, batch: int = 1, tokens: int = 1):
    """The model's step over `tokens` new tokens (1: a decoding step; the prompt's length: a
    prefill) for `batch` sequences with a static cache of `cache` positions, exported."""
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    m.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static", max_length=cache,
        cache_config={"batch_size": batch, "max_cache_len": cache, "device": device})
    step = TorchExportableModuleWithStaticCache(m, batch_size=batch, max_cache_len=cache)
    example = {"input_ids": torch.ones(batch, tokens, dtype=torch.int64, device=device),
               "cache_position": torch.arange(tokens, device=device)}
    with torch.no_grad():
        return torch.export.export(step, (), example, strict=False)


def first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def kiln_tokens(prefill, step, prompt: list[int], steps: int, device: str) -> list[int]:
    """Greedy tokens after `prompt`: the compiled prefill fills the cache with the prompt, and
    the compiled step, sharing that cache, decodes one token at a time."""
    step.share_state(prefill)
    logits = first(prefill(input_ids=torch.tensor([prompt], device=device),
                           cache_position=torch.arange(len(prompt), device=device)))
    tokens = []
    for pos in range(len(prompt), len(prompt) + steps):
        token = int(logits[0, -1].argmax())
        tokens.append(token)
        if len(tokens) == steps:
            break
        logits = first(step(input_ids=torch.tensor([[token]], device=device),
                            cache_position=torch.tensor([pos], device=device)))
    return tokens


def eager_generate(m, prompt: list[int], steps: int, device: str):
    """Eager `generate`'s greedy tokens after `prompt`, and its logits at each step."""
    with torch.no_grad():
        m.generation_config.max_length = None
        out = m.generate(torch.tensor([prompt], device=device), max_new_tokens=steps, min_new_tokens=steps,
                         do_sample=False, output_scores=True, return_dict_in_generate=True,
                         pad_token_id=0)
    return out.sequences[0, len(prompt):].tolist(), [s[0].float() for s in out.scores]


def compare(got: list[int], want: list[int], scores, noise: float) -> tuple[bool, str]:
    """Whether Kiln's tokens are eager's, up to a step where eager's two best logits are
    within `noise` of each other (relative to the largest), and what happened."""
    for k, (a, b) in enumerate(zip(got, want)):
        if a == b:
            continue
        top = scores[k].topk(2).values
        gap = float(top[0] - top[1]) / max(float(scores[k].abs().max()), 1e-30)
        if gap <= noise:
            return True, (f"tokens match for {k} steps; at step {k} Kiln chose {a} and eager {b}, whose two best "
                          f"logits differ by {gap:.2e} of the largest (float32 noise, at most {noise:g})")
        return False, (f"step {k}: Kiln chose {a}, eager {b}, whose two best logits differ by {gap:.2e} of the "
                       f"largest: more than float32 noise ({noise:g})")
    if len(got) != len(want):
        return False, f"Kiln gave {len(got)} tokens, eager {len(want)}"
    return True, f"all {len(got)} tokens match eager's"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kind", choices=["gpt2", "llama", *PRESETS],
                   help="a small model of these sizes' flags, or a preset of real size (its sizes override them)")
    p.add_argument("--cache", type=int, default=0, help="positions in the static cache (default: prompt + steps)")
    p.add_argument("--steps", type=int, default=64, help="tokens to generate")
    p.add_argument("--prompt", type=int, default=5, help="prompt tokens (random)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2, help="llama's key/value heads")
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mode", choices=["default", "reduce-overhead"], default="default",
                   help="reduce-overhead: each decoding step one CUDA graph replay")
    p.add_argument("--init", type=float, default=0.2,
                   help="the weights' standard deviation: transformers' 0.02 makes a random model repeat one token")
    p.add_argument("--noise", type=float, default=1e-5,
                   help="the largest gap between eager's two best logits, relative to the largest, at which a "
                        "different token is float32 noise")
    a = p.parse_args(argv)
    for key, value in PRESETS.get(a.kind, {}).items():
        setattr(a, key, value)
    a.cache = max(a.cache, a.prompt + a.steps)
    import kiln

    torch.manual_seed(a.seed)
    m = language_model(a).to(a.device)
    prompt = torch.randint(1, a.vocab, (a.prompt,)).tolist()
    prefill = kiln.compile(export_step(m, a.cache, a.device, tokens=a.prompt), device=a.device)
    step = kiln.compile(export_step(m, a.cache, a.device), device=a.device, mode=a.mode)
    got = kiln_tokens(prefill, step, prompt, a.steps, a.device)
    want, scores = eager_generate(m, prompt, a.steps, a.device)
    ok, what = compare(got, want, scores, a.noise)
    print(f"{a.kind}, {a.layers} layers, {a.hidden} wide, cache {a.cache}, prompt {prompt}, {a.steps} steps on "
          f"{a.device}")
    print(f"kiln:  {got}")
    print(f"eager: {want}")
    print(("ok: " if ok else "FAILED: ") + what)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
