"""The models of bench/gpu/precision.py (issue 45's seven, and fourteen families beyond them) at their
real sizes, with random weights.

Every model is built the same way in every process: float32 on the CPU from seed 0, moved to
the GPU, then converted with `module.to(dtype)`. The convolution networks' batch norms get
running statistics from two seeded batches first (on the CPU), so that they
normalise as trained ones do and 16-bit activations stay in range; torchvision's defaults
(mean 0, variance 1) would let ResNet-50's activations grow block after block.

`fingerprint` sums a model's state: the export records it, and a later process that rebuilds
the model checks it, so eager and Kiln's weights file hold the same numbers.

Needs torch, transformers and torchvision: only bench/gpu/precision_child.py imports it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from model_zoo import Outputs, Tuple  # noqa: E402

BATCH, TOKENS, IMAGE = 8, 512, 224

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    # GPT-2 small: the default config (124 M parameters, the LM head tied to the embedding).
    cfg = GPT2Config(attn_implementation="sdpa")
    return Outputs(GPT2LMHeadModel(cfg), ["input_ids"], ["logits"], use_cache=False), cfg


def bert():
    from transformers import BertConfig, BertModel
    cfg = BertConfig(attn_implementation="sdpa")
    return Outputs(BertModel(cfg), ["input_ids", "attention_mask"],
                   ["last_hidden_state", "pooler_output"]), cfg


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                      max_position_embeddings=2048, attn_implementation="sdpa")
    return Outputs(LlamaForCausalLM(cfg), ["input_ids"], ["logits"], use_cache=False), cfg


def t5():
    from transformers import T5Config, T5EncoderModel
    # t5-small's config, written out (the Hub is out of reach on the GPU machine).
    cfg = T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                   relative_attention_num_buckets=32, relative_attention_max_distance=128,
                   feed_forward_proj="relu")
    return Outputs(T5EncoderModel(cfg), ["input_ids", "attention_mask"], ["last_hidden_state"]), cfg


def vit():
    from transformers import ViTConfig, ViTForImageClassification
    # ViT-B/16: transformers' default config (224², patches of 16, 768 wide, 12 layers),
    # with ImageNet's 1000 classes; sdpa attention, as the other transformers.
    cfg = ViTConfig(num_labels=1000, attn_implementation="sdpa")
    return Outputs(ViTForImageClassification(cfg), ["pixel_values"], ["logits"]), cfg


def resnet():
    from torchvision.models import resnet50
    return Tuple(resnet50(weights=None)), {"torchvision": "resnet50"}


def mobilenet():
    from torchvision.models import mobilenet_v2
    return Tuple(mobilenet_v2(weights=None)), {"torchvision": "mobilenet_v2"}


def qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    # Qwen2-0.5B's shape (494 M parameters, 14:2 heads, a 151936-token vocabulary tied to the
    # LM head), written out as the others are.
    cfg = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                      num_key_value_heads=2, vocab_size=151936, max_position_embeddings=2048,
                      tie_word_embeddings=True, attn_implementation="sdpa")
    return Outputs(Qwen2ForCausalLM(cfg), ["input_ids"], ["logits"], use_cache=False), cfg


def deberta():
    from transformers import DebertaV2Config, DebertaV2Model
    # DeBERTa-v3-base's config: relative attention over 256 position buckets, shared keys.
    cfg = DebertaV2Config(vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                          intermediate_size=3072, max_position_embeddings=512, relative_attention=True,
                          position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True,
                          pos_att_type=["p2c", "c2p"], layer_norm_eps=1e-7, position_biased_input=False)
    return Outputs(DebertaV2Model(cfg), ["input_ids", "attention_mask"], ["last_hidden_state"]), cfg


def opt():
    from transformers import OPTConfig, OPTForCausalLM
    # OPT-125m: the default config (768 wide, 12 layers, learned positions offset by 2).
    cfg = OPTConfig(attn_implementation="sdpa")
    return Outputs(OPTForCausalLM(cfg), ["input_ids"], ["logits"], use_cache=False), cfg


def bart():
    from transformers import BartConfig, BartModel
    # bart-base: 6 encoder and 6 decoder layers of 768; the decoder reads the shifted input ids.
    cfg = BartConfig(vocab_size=50265, d_model=768, encoder_layers=6, decoder_layers=6,
                     encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072,
                     decoder_ffn_dim=3072, max_position_embeddings=1024, attn_implementation="sdpa")
    return Outputs(BartModel(cfg), ["input_ids", "attention_mask"], ["last_hidden_state"], use_cache=False), cfg


def clip_vision():
    from transformers import CLIPVisionConfig, CLIPVisionModel
    # CLIP's ViT-B/32 image tower: the default config (patches of 32, quick GELU).
    cfg = CLIPVisionConfig(attn_implementation="sdpa")
    return Outputs(CLIPVisionModel(cfg), ["pixel_values"], ["last_hidden_state", "pooler_output"]), cfg


def segformer():
    from transformers import SegformerConfig, SegformerForSemanticSegmentation
    # SegFormer-B0 (the default config): overlapping patch merges, reduced-key attention, a 150-class head.
    cfg = SegformerConfig(num_labels=150)
    return Outputs(SegformerForSemanticSegmentation(cfg), ["pixel_values"], ["logits"]), cfg


def torchvision_model(name: str):
    def build():
        import torchvision.models
        return Tuple(getattr(torchvision.models, name)(weights=None)), {"torchvision": name}
    return build


# name: (builder, vocabulary of the token ids or None for images, takes an attention mask)
MODELS = {
    "gpt2": (gpt2, 50257, False),
    "bert": (bert, 30522, True),
    "llama": (llama, 32000, False),
    "t5": (t5, 32128, True),
    "vit": (vit, None, False),
    "resnet50": (resnet, None, False),
    "mobilenet_v2": (mobilenet, None, False),
    # Families beyond issue 45's seven, at their real sizes.
    "qwen2": (qwen2, 151936, False),
    "convnext_tiny": (torchvision_model("convnext_tiny"), None, False),
    "swin_t": (torchvision_model("swin_t"), None, False),
    "efficientnet_b0": (torchvision_model("efficientnet_b0"), None, False),
    "deberta": (deberta, 128100, True),
    "opt": (opt, 50272, False),
    "bart": (bart, 50265, True),
    "clip_vision": (clip_vision, None, False),
    "segformer": (segformer, None, False),
    "densenet121": (torchvision_model("densenet121"), None, False),
    "resnext50": (torchvision_model("resnext50_32x4d"), None, False),
    "regnet_y_1_6gf": (torchvision_model("regnet_y_1_6gf"), None, False),
    "mobilenet_v3_large": (torchvision_model("mobilenet_v3_large"), None, False),
    "maxvit_t": (torchvision_model("maxvit_t"), None, False),
}


def make_inputs(name: str, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
    """The model's inputs, the same in every process: token ids (and, for the models that take one, a mask
    whose second half of the batch pads its last quarter) or images in `dtype`."""
    _, vocab, masked = MODELS[name]
    gen = torch.Generator().manual_seed(1)
    if vocab is None:
        return [torch.randn(BATCH, 3, IMAGE, IMAGE, generator=gen).to(device, dtype)]
    ids = torch.randint(0, vocab, (BATCH, TOKENS), generator=gen, dtype=torch.int64)
    if not masked:
        return [ids.to(device)]
    mask = torch.ones(BATCH, TOKENS, dtype=torch.int64)
    mask[BATCH // 2:, TOKENS - TOKENS // 4:] = 0
    return [ids.to(device), mask.to(device)]


def calibrate_batch_norms(module: torch.nn.Module) -> None:
    """Running statistics from two seeded batches of random images, on the CPU (where the same
    threads give the same sums in every process)."""
    norms = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches
    gen = torch.Generator().manual_seed(2)
    module.train()
    with torch.no_grad():
        for _ in range(2):
            module(torch.randn(BATCH, 3, IMAGE, IMAGE, generator=gen))
    module.eval()


def build_float32(name: str, device: torch.device):
    """The model in float32 on `device`, in eval mode, and its config (a dict)."""
    builder = MODELS[name][0]
    torch.manual_seed(0)
    module, cfg = builder()
    calibrate_batch_norms(module)
    module = module.eval().to(device)
    return module, (cfg.to_dict() if hasattr(cfg, "to_dict") else cfg)


def build(name: str, dtype: torch.dtype, device: torch.device):
    """The model in `dtype` on `device` (float32 built, then `module.to(dtype)`)."""
    module, cfg = build_float32(name, device)
    return module.to(dtype), cfg


def fingerprint(module: torch.nn.Module) -> list[float]:
    """The sum and the sum of squares of every floating-point tensor of the state, in float64."""
    total, squares = 0.0, 0.0
    with torch.no_grad():
        for t in module.state_dict().values():
            if t.is_floating_point():
                d = t.double()
                total += d.sum().item()
                squares += (d * d).sum().item()
    return [total, squares]


def same_fingerprint(a: list[float], b: list[float]) -> bool:
    return all(abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y)) for x, y in zip(a, b))
